"""`abf serve` against hostile and careless clients (issue 23, the front):
every row reproduces an attack or an operator's mistake against a real
server process and checks the answer and what it cost the server.

- limits before work: chunked and JSON bodies cost the server less than
  3x max_body_bytes of peak memory (VmHWM of /proc/<pid>/status);
- slow clients: 200 connections trickling header lines leave /readyz and
  authenticated requests answering within 1 s, each is cut at its request
  deadline, the per-address cap refuses the excess, SIGTERM waits no longer
  than shutdown_grace_seconds;
- one owner per port, on both fronts;
- operator habits: key and TLS key modes, failed reloads, 401 headers,
  the warning for a non-loopback address without tokens.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

MEMBERS = support.digests("member", 200)
NEW = support.digests("new", 200)
TOKEN = "hostile-test-token-0123456789"
ADMIN = "hostile-admin-token-0123456789"
MIB = 1 << 20


def peak_kib(pid):
    """VmHWM (peak resident memory) of process `pid`, in KiB."""
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for %d" % pid)


def host_port(server):
    host, port = server.http.rsplit(":", 1)
    return host, int(port)


def connect(server, source="127.0.0.1", timeout=10):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(host_port(server))
    return sock


def read_reply(sock, timeout=10):
    """What the server sends until it closes or `timeout` passes."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = [line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(body) >= int(length[0]):
                    break
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def read_head(sock):
    """An answer's status line and headers (up to the empty line), read with
    the socket's own timeout."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


class Fixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-hostile-")
        cls.catalog = support.Catalog(cls.dir)
        cls.catalog.add(MEMBERS)
        cls.catalog.build()
        cls.tokens = support.write_private(os.path.join(cls.dir, "tokens"),
                                           "%s default\n%s @admin\n" % (TOKEN, ADMIN))

    def config(self, name, **limits):
        path = os.path.join(self.dir, name)
        with open(path, "w") as out:
            json.dump({"listen": "127.0.0.1:0", "token_file": self.tokens,
                       "shutdown_grace_seconds": limits.pop("shutdown_grace_seconds", 30),
                       "http_threads": limits.pop("http_threads", 64),
                       "tenants": [{"name": "default", "snapshot": self.catalog.snapshot,
                                    "db": self.catalog.db}],
                       "limits": limits}, out)
        return path


class LimitsBeforeWork(Fixture):
    """Every request costs at most a small multiple of max_body_bytes."""

    LIMIT = 4 * MIB

    def setUp(self):
        self.server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                     "--token-file", self.tokens, "--max-body-bytes", self.LIMIT)
        # A request of every kind first, so the baseline has the allocator
        # and threads warm.
        response = requests.post(self.server.url + "/v1/default/find-missing",
                                 data=b"".join(MEMBERS[:10] + NEW[:10]),
                                 headers={"Content-Type": "application/octet-stream",
                                          "Authorization": "Bearer " + TOKEN}, timeout=10)
        self.assertEqual(response.content, b"".join(NEW[:10]))
        self.baseline = peak_kib(self.server.process.pid)

    def tearDown(self):
        self.assertEqual(self.server.stop(), 0)

    def assert_cheap(self, what, requests_at_once=1):
        """Peak memory grew by less than 3x max_body_bytes a request."""
        grown = peak_kib(self.server.process.pid) - self.baseline
        bound = 3 * self.LIMIT * requests_at_once
        sys.stderr.write("%s: peak memory grew %d KiB (bound %d KiB)\n"
                         % (what, grown, bound // 1024))
        # Under AddressSanitizer freed memory waits in its quarantine (256 MB)
        # and every allocation has red zones: the peak says nothing of the
        # server's own. The release suite checks the bound; this one runs
        # the same requests for the sanitizer to watch.
        if os.environ.get("ABF_SANITIZE"):
            return
        self.assertLess(grown * 1024, bound, what)

    def send_chunked(self, headers, total):
        """Sends `total` bytes of zeros chunked after `headers` on a thread;
        returns (socket, the reply, bytes sent)."""
        sock = connect(self.server, timeout=30)
        sock.sendall(headers)
        sent = [0]

        def pump():
            chunk = b"%x\r\n" % MIB + b"\0" * MIB + b"\r\n"
            try:
                while sent[0] < total:
                    sock.sendall(chunk)
                    sent[0] += MIB
                sock.sendall(b"0\r\n\r\n")
            except OSError:
                pass

        thread = threading.Thread(target=pump)
        thread.start()
        reply = read_reply(sock, timeout=30)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        thread.join(timeout=30)
        sock.close()
        return reply, sent[0]

    def test_chunked_gigabyte_without_token_is_refused_before_its_body(self):
        head = (b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        # The answer comes before any of the body is sent.
        sock = connect(self.server)
        start = time.monotonic()
        sock.sendall(head)
        reply = read_reply(sock, timeout=5)
        sock.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 401"), reply[:200])
        self.assertIn(b"WWW-Authenticate: Bearer", reply)
        self.assertLess(time.monotonic() - start, 2)
        # And sent anyway, 1 GiB of it: the server has closed, so the
        # client's sending stops early.
        reply, sent = self.send_chunked(head, 1 << 30)
        self.assertTrue(reply.startswith(b"HTTP/1.1 401"), reply[:200])
        self.assertLess(sent, 256 * MIB)
        self.assert_cheap("1 GiB chunked, no token")

    def test_chunked_gigabyte_with_token_stops_at_max_body_bytes(self):
        head = (b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                b"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        reply, sent = self.send_chunked(head, 1 << 30)
        self.assertTrue(reply.startswith(b"HTTP/1.1 413"), reply[:200])
        self.assertIn(b"body_too_large", reply)
        self.assertLess(sent, 256 * MIB)
        self.assert_cheap("1 GiB chunked, with a token")
        # A Content-Length over the limit: 413 before the body.
        sock = connect(self.server)
        sock.sendall(b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                     b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
                     % (1 << 30))
        reply = read_reply(sock, timeout=5)
        sock.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 413"), reply[:200])

    def test_json_bodies_are_not_parsed_into_a_tree(self):
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN}
        url = self.server.url + "/v1/default/find-missing"
        # Numbers where digests belong, as many as the limit allows.
        count = (self.LIMIT - 64) // 2
        zeros = b'{"digests":[' + b"0," * (count - 1) + b"0]}"
        self.assertLessEqual(len(zeros), self.LIMIT)
        response = requests.post(url, data=zeros, headers=headers, timeout=30)
        self.assertEqual(response.status_code, 400, response.text)
        self.assertEqual(response.json()["error"]["code"], "invalid_digest")
        self.assert_cheap("JSON of %d zeros" % count)
        # Arrays nested as deep as the limit allows, in a key beside "digests".
        nested = b'{"digests":[],"x":' + b"[" * (self.LIMIT - 64) + b"}"
        response = requests.post(url, data=nested, headers=headers, timeout=30)
        self.assertEqual(response.status_code, 400, response.text)
        self.assertEqual(response.json()["error"]["code"], "invalid_json")
        self.assert_cheap("JSON nested %d deep" % (self.LIMIT - 64))
        # Four at once.
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            requests.post(url, data=zeros, headers=headers, timeout=30).status_code))
            for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        self.assertEqual(results, [400] * 4)
        self.assert_cheap("4 JSON bodies of zeros at once", requests_at_once=4)
        # Digest strings are read as they come and answered.
        strings = b'{"digests":[' + b",".join(
            b'"' + d.hex().encode() + b'"' for d in MEMBERS) + b"]}"
        response = requests.post(url, data=strings, headers=headers, timeout=30)
        self.assertEqual(response.status_code, 200, response.text)

    def test_header_flood_is_cut_at_max_header_bytes(self):
        sock = connect(self.server)
        start = time.monotonic()
        try:
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
            for i in range(4096):
                sock.sendall(b"X-Flood-%d: %s\r\n" % (i, b"a" * 250))
        except OSError:
            pass
        reply = read_reply(sock, timeout=5)
        sock.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 431"), reply[:200])
        self.assertLess(time.monotonic() - start, 5)
        self.assert_cheap("1 MiB of header lines")


class SlowClients(Fixture):
    """Connections that trickle bytes hold nothing but their own thread, and
    not past their deadline."""

    def trickle(self, server, sources, per_source, stop, sockets):
        """Opens per_source connections from each source address, each
        sending a request line and then one header line every 0.5 s."""
        for source in sources:
            for _ in range(per_source):
                sock = connect(server, source=source)
                sock.sendall(b"GET /readyz HTTP/1.1\r\n")
                sockets.append((sock, time.monotonic()))
        while not stop.is_set():
            for sock, _ in sockets:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            stop.wait(0.5)

    def test_two_hundred_slow_connections_starve_nothing(self):
        config = self.config("slow.json", request_timeout_seconds=3,
                             max_connections_per_client=64, http_threads=4)
        server = support.Server("--config", config, listen=False)
        stop = threading.Event()
        sockets = []
        thread = threading.Thread(target=self.trickle, args=(
            server, ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"], 50, stop, sockets))
        try:
            thread.start()
            deadline = time.monotonic() + 20
            while len(sockets) < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(len(sockets), 200)
            time.sleep(0.5)
            for _ in range(5):
                start = time.monotonic()
                ready = requests.get(server.url + "/readyz", timeout=5)
                took = time.monotonic() - start
                self.assertEqual(ready.status_code, 200)
                self.assertLess(took, 1.0, "/readyz took %.2f s" % took)
                start = time.monotonic()
                answer = requests.post(server.url + "/v1/default/find-missing",
                                       data=MEMBERS[0] + NEW[0],
                                       headers={"Content-Type": "application/octet-stream",
                                                "Authorization": "Bearer " + TOKEN}, timeout=5)
                took = time.monotonic() - start
                self.assertEqual(answer.content, NEW[0])
                self.assertLess(took, 1.0, "find-missing took %.2f s" % took)
                time.sleep(0.3)
            # Every trickling connection is answered 408 and closed at its
            # deadline (3 s), however often it sends.
            late = 0
            # A deadline that trickling moved would never cut them (they send
            # until the end): waited for up to 10 s past it, on a busy machine.
            for sock, opened in sockets:
                reply = read_reply(sock, timeout=max(0.1, opened + 3 + 10 - time.monotonic()))
                if not reply.startswith(b"HTTP/1.1 408"):
                    late += 1
            self.assertEqual(late, 0, "%d of 200 slow connections were not cut at 3 s" % late)
        finally:
            stop.set()
            thread.join(timeout=30)
            for sock, _ in sockets:
                sock.close()
            self.assertEqual(server.stop(), 0)
        self.assertIn('"status":408', server.last_log)

    def test_connections_per_address_are_capped(self):
        config = self.config("cap.json", max_connections_per_client=8, max_connections=12)
        server = support.Server("--config", config, listen=False)
        held = []
        try:
            # 8, then the 2 let in past the cap for one health probe each
            # (issue 33), which wait for their request. The server counts a
            # connection when it accepts it, in the order they were made: the
            # eleventh is counted after the ten.
            for _ in range(10):
                held.append(connect(server, source="127.0.0.2"))
            extra = connect(server, source="127.0.0.2")
            reply = read_reply(extra, timeout=5)
            extra.close()
            self.assertTrue(reply.startswith(b"HTTP/1.1 503"), reply[:200])
            self.assertIn(b"max_connections_per_client", reply)
            # Another address still gets in, up to the total.
            for _ in range(4):
                held.append(connect(server, source="127.0.0.3"))
            extra = connect(server, source="127.0.0.4")
            reply = read_reply(extra, timeout=5)
            extra.close()
            self.assertTrue(reply.startswith(b"HTTP/1.1 503"), reply[:200])
            # Two closed: once the server has seen them go, a new one gets in.
            for sock in held[:2]:
                sock.close()

            def healthz():
                try:
                    return requests.get(server.url + "/healthz", timeout=5).status_code
                except requests.exceptions.ConnectionError:
                    return None  # refused (503) before the request was read

            support.wait_until(lambda: healthz() == 200,
                               what="a connection admitted after two were closed")
        finally:
            for sock in held:
                sock.close()
            self.assertEqual(server.stop(), 0)

    def test_short_body_times_out_at_the_request_deadline(self):
        config = self.config("short.json", request_timeout_seconds=2)
        server = support.Server("--config", config, listen=False)
        try:
            sock = connect(server)
            start = time.monotonic()
            sock.sendall(b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                         b"Content-Type: application/octet-stream\r\nContent-Length: 64\r\n\r\n"
                         + b"\0" * 10)
            # One more byte a second does not move the deadline.
            for _ in range(3):
                time.sleep(0.9)
                try:
                    sock.sendall(b"\0")
                except OSError:
                    break
            reply = read_reply(sock, timeout=10)
            took = time.monotonic() - start
            sock.close()
            self.assertTrue(reply.startswith(b"HTTP/1.1 408"), reply[:200])
            self.assertIn(b"request_timeout", reply)
            self.assertLess(took, 4)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_sigterm_waits_no_longer_than_the_grace(self):
        config = self.config("grace.json", request_timeout_seconds=60, shutdown_grace_seconds=2)
        server = support.Server("--config", config, listen=False)
        stop = threading.Event()
        sockets = []
        held = []
        thread = threading.Thread(target=self.trickle,
                                  args=(server, ["127.0.0.2"], 40, stop, sockets))
        try:
            thread.start()
            support.wait_until(lambda: len(sockets) >= 40, what="40 slow connections")
            # And one request surely in flight: its 100 Continue says the
            # server reads it (a trickling one may still count as idle, and
            # idle connections close at once); its body never comes.
            reading = connect(server, timeout=30)
            held.append(reading)
            reading.sendall(b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                            b"Content-Type: application/octet-stream\r\n"
                            b"Expect: 100-continue\r\nContent-Length: 64\r\n\r\n")
            interim = read_head(reading)
            self.assertTrue(interim.startswith(b"HTTP/1.1 100 "), interim)
            start = time.monotonic()
            server.signal(signal.SIGTERM)
            self.assertEqual(server.process.wait(timeout=30), 0)
            took = time.monotonic() - start
            self.assertLess(took, 5, "SIGTERM took %.1f s with 40 slow clients" % took)
        finally:
            stop.set()
            thread.join(timeout=30)
            for sock in held + [sock for sock, _ in sockets]:
                sock.close()
            server.stop()
        self.assertIn("shutdown_grace_expired", server.last_log)


class OneOwnerPerPort(Fixture):
    def test_a_second_server_on_a_used_port_exits_1(self):
        first = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                               "--grpc-listen", "127.0.0.1:0")
        try:
            second = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                    "--listen", first.http, "--grpc-listen", "127.0.0.1:0",
                                    listen=False, expect_failure=True)
            self.assertEqual(second.returncode, 1)
            self.assertIn("cannot listen on " + first.http, second.log_text())
            second.stop()
            second = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                    "--grpc-listen", first.grpc, expect_failure=True)
            self.assertEqual(second.returncode, 1)
            self.assertIn("cannot listen on " + first.grpc, second.log_text())
            second.stop()
            # The first one still answers every request.
            for _ in range(20):
                response = requests.get(first.url + "/v1/default/blobs/sha256:" +
                                        MEMBERS[0].hex(), timeout=5)
                self.assertEqual(response.status_code, 200)
        finally:
            self.assertEqual(first.stop(), 0)


class OperatorHabits(Fixture):
    def test_key_files_others_may_write_are_refused(self):
        key = os.path.join(self.dir, "tenant.key")
        if not os.path.exists(key):
            support.run_abf("key", "generate", "--output", key)
        try:
            for mode in (0o602, 0o620, 0o644):
                os.chmod(key, mode)
                server = support.Server("--snapshot", self.catalog.snapshot, "--db",
                                        self.catalog.db, "--key-file", key, expect_failure=True)
                self.assertEqual(server.returncode, 1)
                self.assertIn(key, server.log_text())
                self.assertIn("mode %03o" % mode, server.log_text())
                server.stop()
        finally:
            os.chmod(key, 0o600)

    def test_tls_private_key_others_may_read_is_refused(self):
        cert = os.path.join(self.dir, "cert.pem")
        key = os.path.join(self.dir, "key.pem")
        result = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
             cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
             "subjectAltName=IP:127.0.0.1"], capture_output=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        os.chmod(key, 0o644)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--tls-cert", cert, "--tls-key", key, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        self.assertIn(key, server.log_text())
        self.assertIn("TLS private key", server.log_text())
        self.assertIn("mode 644", server.log_text())
        server.stop()
        os.chmod(key, 0o600)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--tls-cert", cert, "--tls-key", key)
        try:
            response = requests.post("https://" + server.http + "/v1/default/find-missing",
                                     data=MEMBERS[0] + NEW[0], verify=cert, timeout=10,
                                     headers={"Content-Type": "application/octet-stream"})
            self.assertEqual(response.content, NEW[0])
        finally:
            self.assertEqual(server.stop(), 0)

    def test_reload_answers_its_outcome_and_needs_no_body(self):
        served = os.path.join(self.dir, "served.abf")
        shutil.copy(self.catalog.snapshot, served)
        server = support.Server("--snapshot", served, "--db", self.catalog.db,
                                "--token-file", self.tokens)
        try:
            admin = {"Authorization": "Bearer " + ADMIN}
            # No body at all (no Content-Length), as `curl -X POST` sends it.
            sock = connect(server)
            start = time.monotonic()
            sock.sendall(b"POST /admin/reload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                         ADMIN.encode() + b"\r\n\r\n")
            reply = read_reply(sock, timeout=10)
            sock.close()
            self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:300])
            self.assertLess(time.monotonic() - start, 3)
            # A refused snapshot: 500 with the reason; the old one serves.
            with open(served + ".tmp", "wb") as out:
                out.write(b"ABF1" + b"\0" * 100)
            os.rename(served + ".tmp", served)
            response = requests.post(server.url + "/admin/reload", headers=admin, timeout=10)
            self.assertEqual(response.status_code, 500, response.text)
            body = response.json()
            self.assertFalse(body["ok"])
            self.assertEqual(body["error"]["code"], "reload_failed")
            self.assertIn("default", body["error"]["message"])
            self.assertFalse(body["tenants"][0]["ok"])
            response = requests.head(server.url + "/v1/default/blobs/sha256:" + MEMBERS[0].hex(),
                                     headers={"Authorization": "Bearer " + TOKEN}, timeout=10)
            self.assertEqual(response.status_code, 200)
            # 401s name the scheme.
            response = requests.post(server.url + "/admin/reload", timeout=10)
            self.assertEqual(response.status_code, 401)
            self.assertTrue(response.headers["WWW-Authenticate"].startswith("Bearer"))
            response = requests.head(server.url + "/v1/default/blobs/sha256:" + MEMBERS[0].hex(),
                                     headers={"Authorization": "Bearer not-a-token-0123456789"},
                                     timeout=10)
            self.assertEqual(response.status_code, 401)
            self.assertTrue(response.headers["WWW-Authenticate"].startswith("Bearer"))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_an_empty_token_file_is_refused_at_start(self):
        empty = support.write_private(os.path.join(self.dir, "empty-tokens"), "# none yet\n")
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--token-file", empty, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        self.assertIn(empty + ": the token file has no tokens", server.log_text())
        server.stop()

    def test_a_file_limit_below_max_connections_is_warned_about(self):
        import resource

        def low_hard_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                preexec_fn=low_hard_limit)
        self.assertEqual(server.stop(), 0)
        warnings = [json.loads(line) for line in server.last_log.splitlines()
                    if "file_limit" in line]
        self.assertEqual(len(warnings), 1, server.last_log)
        self.assertEqual(warnings[0]["limit"], 64)
        self.assertEqual(warnings[0]["max_connections"], 1024)
        self.assertIn("WARNING: RLIMIT_NOFILE is 64", warnings[0]["message"])

        # A soft limit below a hard one that fits is raised, silently.
        def low_soft_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 4096))

        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                preexec_fn=low_soft_limit)
        with open("/proc/%d/limits" % server.process.pid) as limits:
            line = [l for l in limits if l.startswith("Max open files")][0]
        self.assertEqual(server.stop(), 0)
        self.assertEqual(line.split()[3:5], ["4096", "4096"], line)
        self.assertNotIn("file_limit", server.last_log)

    def test_non_loopback_without_tokens_warns(self):
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--listen", "0.0.0.0:0", listen=False)
        self.assertEqual(server.stop(), 0)
        warnings = [line for line in server.last_log.splitlines() if "insecure_listen" in line]
        self.assertEqual(len(warnings), 1, server.last_log)
        self.assertIn("WARNING", warnings[0])
        self.assertIn('"level":"warn"', warnings[0])
        # Not on loopback, nor with tokens.
        for args in (("--listen", "127.0.0.1:0"), ("--listen", "0.0.0.0:0", "--token-file",
                                                    self.tokens)):
            server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                    *args, listen=False)
            self.assertEqual(server.stop(), 0)
            self.assertNotIn("insecure_listen", server.last_log)


def read_until_closed(sock, timeout=5):
    """What the server sends until it closes or `timeout` passes, and
    whether it closed."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        return data, True
    return data, False


class RequestFraming(Fixture):
    """RFC 9112 framing, strictly: no request smuggled inside another's
    body, no answer per line of garbage (issue 23, F6 and F7)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = support.Server("--snapshot", cls.catalog.snapshot, "--db", cls.catalog.db)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        super().tearDownClass()
        assert code == 0, code

    def exchange(self, raw, timeout=5):
        """Sends `raw` on a new connection; the answers and whether the
        server closed the connection by itself."""
        sock = connect(self.server)
        try:
            sock.sendall(raw)
        except OSError:
            pass
        reply, closed = read_until_closed(sock, timeout)
        sock.close()
        return reply, closed

    def assert_refused(self, raw, why):
        """One 400 naming `why`, then the connection closes."""
        start = time.monotonic()
        reply, closed = self.exchange(raw)
        self.assertTrue(closed, "the connection stayed open after %r" % raw[:120])
        self.assertLess(time.monotonic() - start, 3)
        self.assertTrue(reply.startswith(b"HTTP/1.1 400 "), reply[:300])
        self.assertEqual(len(re.findall(rb"(?:^|\n)HTTP/1\.1 \d{3} ", reply)), 1, reply)
        body = json.loads(reply.partition(b"\r\n\r\n")[2])
        self.assertEqual(body["error"]["code"], "bad_request", body)
        self.assertIn(why, body["error"]["message"])

    def find_missing(self, framing, body, extra=b""):
        return (b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: text/plain\r\n" + framing + b"\r\n" + body + extra)

    def test_two_content_lengths_smuggle_nothing(self):
        line = NEW[0].hex().encode() + b"\n"
        self.assertEqual(len(line), 65)
        inner = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        for lengths in ((65, 65 + len(inner)), (65 + len(inner), 65), (65, 65)):
            framing = b"".join(b"Content-Length: %d\r\n" % n for n in lengths)
            self.assert_refused(self.find_missing(framing, line + inner),
                                "Content-Length appears more than once")

    def test_content_length_with_transfer_encoding_is_refused(self):
        line = NEW[0].hex().encode() + b"\n"
        for framing in (b"Content-Length: 65\r\nTransfer-Encoding: chunked\r\n",
                        b"Transfer-Encoding: chunked\r\nContent-Length: 65\r\n"):
            self.assert_refused(self.find_missing(framing, b"41\r\n" + line + b"\r\n0\r\n\r\n"),
                                "Content-Length together with Transfer-Encoding")
        self.assert_refused(self.find_missing(b"Transfer-Encoding: chunked\r\n"
                                              b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
                            "Transfer-Encoding appears more than once")

    def test_content_length_syntax(self):
        line = NEW[0].hex().encode() + b"\n"
        for value in (b"+65", b"-65", b"0x41", b"6 5", b"65,65", b"", b"65.0", b"\xd9\xa6"):
            self.assert_refused(self.find_missing(b"Content-Length: " + value + b"\r\n", line),
                                "Content-Length is not a decimal number")
        # Whitespace around the value is not part of it (RFC 9110 5.5).
        reply, _ = self.exchange(self.find_missing(b"Content-Length:  65 \r\nConnection: close\r\n",
                                                   line))
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 "), reply[:300])
        self.assertIn(NEW[0].hex().encode(), reply)

    def test_control_characters_in_fields_are_refused(self):
        for byte in (0, 1, 0x0b, 0x1f, 0x7f):
            raw = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Evil: a" + bytes([byte]) +
                   b"b\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assert_refused(raw, "control character 0x%02x in the value of X-Evil" % byte)
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-E\x00vil: a\r\n\r\n",
                            "the field name is not a token")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
                            "the field name is not a token")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "obs-fold")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost: x\rX: y\r\n\r\n",
                            "a CR not followed by LF")
        # A tab and obs-text (bytes >= 0x80) are field content.
        reply, _ = self.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: a\tb\xe9\r\n"
                                 b"Connection: close\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 "), reply[:300])

    def test_malformed_request_lines_get_one_answer_and_a_close(self):
        valid = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        for line, why in ((b"\xc3\x89GET /healthz HTTP/1.1", "the method is not a token"),
                          (b"garbage", "not `method SP target SP version`"),
                          (b"GET  /healthz HTTP/1.1", "not `method SP target SP version`"),
                          (b"GET /healthz HTTP/1.1 x", "not `method SP target SP version`"),
                          (b"GET /h\xc3\xa9 HTTP/1.1", "not visible ASCII"),
                          (b"GET /healthz HTTP/11", "HTTP version"),
                          (b"GET /healthz HTTP/1.2", "HTTP version"),
                          (b"GET /healthz http/1.1", "HTTP version"),
                          (b"get /healthz HTTP/1.1", "the method is not one of")):
            self.assert_refused(line + b"\r\n" + b"garbage\r\n" * 5 + valid, why)

    def test_bare_lf_line_ends_are_refused(self):
        self.assert_refused(b"GET /healthz HTTP/1.1\nHost: x\n\n", "bare LF")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost: x\n\r\n", "bare LF")

    # The last request of an exchange that must leave the connection open:
    # answered, it says the server kept the connection for it, and the close
    # it asks for says that nothing more will come (no waiting for silence).
    LAST = b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

    def answers_before_last(self, raw):
        """The answers to `raw`, sent with LAST after it on one connection,
        and LAST's own answer (asserted to be the final one)."""
        reply, closed = self.exchange(raw + self.LAST, timeout=30)
        self.assertTrue(closed, reply)
        before, sep, last = reply.rpartition(b"HTTP/1.1 ")
        self.assertTrue(sep and last.startswith(b"200 ") and b'"ready"' in last, reply)
        return before

    def test_leading_empty_lines_are_skipped_up_to_four(self):
        valid = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        reply = self.answers_before_last(b"\r\n" * 4 + valid + b"\r\n" + valid)
        self.assertEqual(reply.count(b"HTTP/1.1 200 "), 2, reply)
        self.assertEqual(len(re.findall(rb"(?:^|\n)HTTP/1\.1 \d{3} ", reply)), 2, reply)
        self.assert_refused(b"\r\n" * 5 + valid, "more than 4 empty lines")

    def test_pipelined_requests_are_each_answered(self):
        raw = b"".join(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" for _ in range(3))
        reply = self.answers_before_last(raw)
        self.assertEqual(reply.count(b"HTTP/1.1 200 "), 3, reply)
        self.assertEqual(len(re.findall(rb"(?:^|\n)HTTP/1\.1 \d{3} ", reply)), 3, reply)

    def chunked(self, chunks, after=b"0\r\n\r\n"):
        return self.find_missing(b"Transfer-Encoding: chunked\r\n", b"".join(chunks) + after)

    def test_chunked_trailers_are_read_and_ignored(self):
        lines = [d.hex().encode() + b"\n" for d in (MEMBERS[0], NEW[1], NEW[2])]
        chunks = [b"%x\r\n%s\r\n" % (len(l), l) for l in lines]
        chunks[1] = b"%x;name=value\r\n%s\r\n" % (len(lines[1]), lines[1])  # an extension
        raw = (self.chunked(chunks, b"0\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n") +
               b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply, closed = self.exchange(raw)
        self.assertTrue(closed)
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 "), reply[:300])
        first, _, second = reply.partition(b"HTTP/1.1 200 OK\r\n")[2].partition(b"HTTP/1.1 ")
        self.assertIn(NEW[1].hex().encode() + b"\n" + NEW[2].hex().encode(), first)
        self.assertNotIn(MEMBERS[0].hex().encode(), first)
        self.assertTrue(second.startswith(b"200 "), reply)
        self.assertIn(b'{"status":"ok"}', second)

    def test_malformed_chunk_sizes_are_refused_at_once(self):
        line = NEW[0].hex().encode() + b"\n"
        for size in (b"-5", b"0x41", b"+41", b"", b" 41", b"41 x", b"4\x001"):
            start = time.monotonic()
            reply, closed = self.exchange(self.chunked([size + b"\r\n" + line + b"\r\n"]))
            self.assertTrue(closed, size)
            self.assertLess(time.monotonic() - start, 3, size)
            self.assertTrue(reply.startswith(b"HTTP/1.1 400 "), (size, reply[:300]))
            body = json.loads(reply.partition(b"\r\n\r\n")[2])
            self.assertEqual(body["error"]["code"], "invalid_chunked_body", (size, body))
        for framing in (b"41\r\n" + line + b"XX0\r\n\r\n", b"41\n" + line + b"\r\n0\r\n\r\n",
                        b"41\r\n" + line + b"\r\n0\r\nno colon\r\n\r\n"):
            reply, closed = self.exchange(self.find_missing(b"Transfer-Encoding: chunked\r\n",
                                                            framing))
            self.assertTrue(closed, framing)
            self.assertIn(b"invalid_chunked_body", reply, framing)

    def test_a_chunked_body_cut_short_is_incomplete(self):
        sock = connect(self.server)
        sock.sendall(self.chunked([b"41\r\n" + NEW[0].hex().encode()], after=b""))
        sock.shutdown(socket.SHUT_WR)
        reply, closed = read_until_closed(sock)
        sock.close()
        self.assertTrue(closed)
        self.assertTrue(reply.startswith(b"HTTP/1.1 400 "), reply)
        self.assertIn(b"incomplete_body", reply)


if __name__ == "__main__":
    unittest.main(verbosity=2)
