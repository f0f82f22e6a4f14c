"""`abf serve` as operators of other servers expect it (issue 37): connection
headers that say what the server does, request bodies in the codings it
documents (and 415 for the others), the build and reload series of /metrics,
a request ID in every answer and access line, one startup rule for every
unusable file, and gRPC's health and reflection services and REAPI's
Capabilities. Real server processes on 127.0.0.1 with ports the OS picks;
every wait polls with a deadline."""

import gzip
import json
import os
import shutil
import socket
import sys
import time
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

MEMBERS = support.digests("member", 400)
NEW = support.digests("new", 400)
TEXT = "text/plain"
OCTETS = "application/octet-stream"


def read_response(sock, head_only=False):
    """(status line, headers as a list of (lowercase name, value), body) of one
    HTTP/1.1 answer read from `sock` (Content-Length framed; none for HEAD)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError("the connection closed inside an answer's head: %r" % data)
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    length = 0 if head_only else int(dict(headers).get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("the connection closed inside an answer's body")
        rest += chunk
    if len(rest) > length:
        raise AssertionError("more bytes than the answer's Content-Length: %r" % rest[length:])
    return lines[0], headers, rest


def names(headers):
    return [name for name, _ in headers]


def closed_by_server(sock):
    """True once the server closed `sock` (polled by the caller)."""
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


class ConnectionHeaders(unittest.TestCase):
    """Keep-Alive says the real idle timeout (and no request count, since
    there is none), never beside Connection: close; no Accept-Ranges; a
    Range header is ignored; bodies in gzip and deflate are inflated, other
    codings get 415."""

    IDLE = 3

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-conventions-")
        cls.catalog = support.Catalog(cls.dir)
        cls.catalog.add(MEMBERS)
        cls.catalog.build()
        cls.server = support.Server("--snapshot", cls.catalog.snapshot, "--db", cls.catalog.db,
                                    "--idle-timeout", cls.IDLE, "--max-body-bytes", 65536)
        host, port = cls.server.http.rsplit(":", 1)
        cls.address = (host, int(port))

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def connect(self):
        sock = socket.create_connection(self.address, timeout=30)
        self.addCleanup(sock.close)
        return sock

    def blob_path(self, item):
        return "/v1/default/blobs/sha256:" + item.hex()

    def find_missing(self, body, headers=None, content_type=TEXT):
        sent = {"Content-Type": content_type}
        sent.update(headers or {})
        return requests.post(self.server.url + "/v1/default/find-missing", data=body,
                             headers=sent, timeout=30)

    def test_a_kept_connection_says_the_real_idle_timeout_and_serves_past_five_requests(self):
        sock = self.connect()
        # httplib's default said "timeout=5, max=5"; the front keeps a
        # connection for idle_timeout_seconds and counts no requests.
        for i in range(12):
            method = "HEAD" if i % 2 else "GET"
            sock.sendall(("%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (
                method, self.blob_path(MEMBERS[i]))).encode())
            status, headers, _ = read_response(sock, head_only=method == "HEAD")
            self.assertIn(" 200 ", status)
            self.assertEqual([v for n, v in headers if n == "keep-alive"],
                             ["timeout=%d" % self.IDLE], headers)
            self.assertNotIn("connection", names(headers))
            self.assertNotIn("accept-ranges", names(headers))
        # The advertised timeout is the one kept: the server closes the
        # idle connection (waited for, with a deadline well past it).
        sock.settimeout(0.2)
        support.wait_until(lambda: closed_by_server(sock), timeout=self.IDLE + 30,
                           what="the server to close the idle connection")

    def test_a_closing_answer_says_connection_close_and_nothing_about_keep_alive(self):
        cases = [
            # The client asks to close.
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            # HTTP/1.0 without Keep-Alive closes after the answer.
            b"GET /healthz HTTP/1.0\r\n\r\n",
            # A refusal before the body (415) leaves it unread: closed.
            b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b"Content-Encoding: br\r\nContent-Length: 4\r\n\r\nabcd",
        ]
        for request in cases:
            with self.subTest(request=request.split(b"\r\n")[0]):
                sock = self.connect()
                sock.sendall(request)
                status, headers, _ = read_response(sock)
                self.assertEqual([v for n, v in headers if n == "connection"], ["close"], headers)
                self.assertNotIn("keep-alive", names(headers))
                support.wait_until(lambda: closed_by_server(sock), timeout=30,
                                   what="the server to close after Connection: close")

    def test_http10_keep_alive_is_answered_as_kept(self):
        sock = self.connect()
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            status, headers, body = read_response(sock)
            self.assertEqual(body, b'{"status":"ok"}\n')
            self.assertEqual(dict(headers).get("connection"), "keep-alive", headers)
            self.assertEqual(dict(headers).get("keep-alive"), "timeout=%d" % self.IDLE)

    def test_blob_answers_offer_no_ranges_and_a_range_is_ignored(self):
        for method in ("HEAD", "GET"):
            response = requests.request(method, self.server.url + self.blob_path(MEMBERS[0]),
                                        headers={"Range": "bytes=0-3"}, timeout=30)
            self.assertEqual(response.status_code, 200)
            self.assertNotIn("Accept-Ranges", response.headers)
            self.assertNotIn("Content-Range", response.headers)
            if method == "GET":
                self.assertTrue(response.json()["present"])
        # A find-missing answer is never cut into a 206 either.
        response = self.find_missing(b"".join(d.hex().encode() + b"\n" for d in NEW[:10]),
                                     headers={"Range": "bytes=0-9"})
        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.text, "".join(d.hex() + "\n" for d in NEW[:10]))

    def test_an_unsupported_content_encoding_is_415_with_a_json_error(self):
        body = b"".join(d.hex().encode() + b"\n" for d in NEW[:3])
        for coding in ("br", "zstd", "compress", "gzip, br", "gzip, gzip"):
            with self.subTest(coding=coding):
                response = self.find_missing(body, headers={"Content-Encoding": coding})
                self.assertEqual(response.status_code, 415, response.text)
                error = response.json()["error"]
                self.assertEqual(error["code"], "unsupported_content_encoding")
                self.assertIn(coding, error["message"])
                self.assertIn("gzip", error["message"])

    def test_gzip_and_deflate_bodies_are_inflated_in_both_framings(self):
        items = MEMBERS[:50] + NEW[:50] + MEMBERS[50:60]
        text = b"".join(d.hex().encode() + b"\n" for d in items)
        binary = b"".join(items)
        want = "".join(d.hex() + "\n" for d in NEW[:50])
        for coding, pack in (("gzip", gzip.compress), ("x-gzip", gzip.compress),
                             ("GZip", gzip.compress), ("deflate", zlib.compress),
                             ("identity", lambda data: data)):
            for chunked in (False, True):
                with self.subTest(coding=coding, chunked=chunked):
                    data = pack(text)
                    response = self.find_missing(iter([data]) if chunked else data,
                                                 headers={"Content-Encoding": coding})
                    self.assertEqual(response.status_code, 200, response.text)
                    self.assertEqual(response.text, want)
        response = self.find_missing(gzip.compress(binary), headers={"Content-Encoding": "gzip"},
                                     content_type=OCTETS)
        self.assertEqual(response.content, b"".join(NEW[:50]))

    def test_a_body_that_is_not_its_coding_or_inflates_past_the_limit_is_refused(self):
        text = b"".join(d.hex().encode() + b"\n" for d in NEW[:100])
        packed = gzip.compress(text)
        for body, what in ((packed[:len(packed) // 2], "ends inside"),
                           (text, "not valid gzip"),
                           (packed + b"tail", "after the end")):
            with self.subTest(what=what):
                response = self.find_missing(body, headers={"Content-Encoding": "gzip"})
                self.assertEqual(response.status_code, 400, response.text)
                self.assertEqual(response.json()["error"]["code"], "invalid_content_encoding")
                self.assertIn(what, response.json()["error"]["message"])
        # 1 MiB of newlines is 1 KiB of gzip: over --max-body-bytes (64 KiB)
        # once inflated, so it is refused at the limit, not held whole.
        bomb = gzip.compress(b"\n" * (1 << 20))
        self.assertLess(len(bomb), 65536)
        response = self.find_missing(bomb, headers={"Content-Encoding": "gzip"})
        self.assertEqual(response.status_code, 413, response.text)
        self.assertEqual(response.json()["error"]["code"], "body_too_large")
        self.assertIn("inflates past", response.json()["error"]["message"])
        # Exactly the limit inflated is accepted (blank lines are skipped).
        response = self.find_missing(gzip.compress(b"\n" * 65536),
                                     headers={"Content-Encoding": "gzip"})
        self.assertEqual(response.status_code, 200, response.text)
        self.assertEqual(response.text, "")


LATER = support.digests("later", 300)  # added after the served snapshot's version
HEX32 = set("0123456789abcdef")


def is_made_id(value):
    return len(value) == 32 and set(value) <= HEX32


class MetricsAndLogs(unittest.TestCase):
    """artifact_bloom_build_info, the last successful reload's time, the
    request ID in answers and access lines, and the filter counters' sum."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-metrics-")
        cls.catalog = support.Catalog(cls.dir)
        cls.catalog.add(MEMBERS)
        cls.catalog.build()     # version 1 is served
        cls.catalog.add(LATER)  # version 2: the snapshot lags by LATER
        config = os.path.join(cls.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"listen": "127.0.0.1:0",
                       "tenants": [{"name": "default", "snapshot": "catalog.abf",
                                    "db": "catalog.db"}],
                       # The fastest release a test can wait for.
                       "metrics_release": {"interval_seconds": 1, "min_missing_digests": 1}},
                      out)
        cls.started_before = time.time()
        cls.server = support.Server("--config", config, listen=False)
        cls.started_after = time.time()

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def metrics(self):
        return requests.get(self.server.url + "/metrics", timeout=30).text

    def metric(self, name, text=None, **labels):
        return support.metric(text if text is not None else self.metrics(), name, **labels)

    def test_build_info_names_the_version_simd_target_and_cuda(self):
        samples = [line for line in self.metrics().splitlines()
                   if line.startswith("artifact_bloom_build_info")]
        self.assertEqual(len(samples), 1, samples)
        labels = dict(item.split("=", 1) for item in
                      samples[0][samples[0].index("{") + 1:samples[0].index("}")].split(","))
        labels = {name: value.strip('"') for name, value in labels.items()}
        self.assertTrue(samples[0].endswith("} 1"), samples[0])
        version = support.run_abf("--version").stdout.decode().splitlines()
        self.assertEqual("abf " + labels["version"], version[0])
        self.assertIn("simd target in use: " + labels["simd_target"], version)
        self.assertIn(labels["cuda"], ("true", "false"))

    def test_last_successful_reload_time_moves_only_on_success(self):
        name = "artifact_bloom_serve_last_reload_success_timestamp_seconds"
        first = self.metric(name, tenant="default")
        self.assertIsNotNone(first)
        self.assertGreaterEqual(first, self.started_before - 1)
        self.assertLessEqual(first, self.started_after + 1)
        ok_before = self.metric("artifact_bloom_serve_reloads_total", tenant="default",
                                result="ok")
        failed_before = self.metric("artifact_bloom_serve_reloads_total", tenant="default",
                                    result="failed")
        # A refused reload (the file is not a snapshot) leaves it where it was.
        served = self.catalog.snapshot
        good = os.path.join(self.dir, "good.abf")
        shutil.copy(served, good)
        with open(served + ".tmp", "wb") as out:
            out.write(b"ABF1" + b"\0" * 64)
        os.rename(served + ".tmp", served)
        response = requests.post(self.server.url + "/admin/reload", timeout=60)
        self.assertEqual(response.status_code, 500, response.text)
        text = self.metrics()
        self.assertEqual(self.metric("artifact_bloom_serve_reloads_total", text,
                                     tenant="default", result="failed"), failed_before + 1)
        self.assertEqual(self.metric(name, text, tenant="default"), first)
        # A good one moves it.
        os.rename(good, served)
        response = requests.post(self.server.url + "/admin/reload", timeout=60)
        self.assertEqual(response.status_code, 200, response.text)
        text = self.metrics()
        self.assertEqual(self.metric("artifact_bloom_serve_reloads_total", text,
                                     tenant="default", result="ok"), ok_before + 1)
        self.assertGreater(self.metric(name, text, tenant="default"), first)

    def test_a_request_id_is_echoed_in_the_answer_and_its_access_line(self):
        connection = support.Connection(self.server)
        self.addCleanup(connection.close)
        path = "/v1/default/blobs/sha256:" + MEMBERS[0].hex()
        sent = {"mine": "3f2b8c1e-9d4a-4e7b-8a6c-1f0e2d3c4b5a",
                "long": "x" * 129, "spaces": "a b", "json": '{"a":1}'}
        got = {}
        for label, value in sent.items():
            status, headers, _ = connection.request("GET", path, headers={"X-Request-Id": value})
            self.assertEqual(status, 200)
            got[label] = headers["X-Request-Id"]
        for _ in range(2):
            status, headers, _ = connection.request("GET", path)
            got.setdefault("none", []).append(headers["X-Request-Id"])
        self.assertEqual(got["mine"], sent["mine"])
        for label in ("long", "spaces", "json"):
            self.assertTrue(is_made_id(got[label]), (label, got[label]))
        self.assertTrue(all(is_made_id(value) for value in got["none"]), got["none"])
        self.assertNotEqual(got["none"][0], got["none"][1])
        connection.sync()
        lines = [line for line in self.server.log_lines()
                 if line.get("event") == "request" and line.get("path") ==
                 "/v1/default/blobs/{digest}"]
        logged = [line.get("request_id") for line in lines]
        for value in [got["mine"], got["long"], got["spaces"], got["json"]] + got["none"]:
            self.assertIn(value, logged)
        # An answer made before any handler (a malformed request line) has
        # one too, in its access line as well.
        host, port = self.server.http.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"NOT A REQUEST\r\n\r\n")
            status, headers, _ = read_response(sock)
        self.assertIn(" 400 ", status)
        made = dict(headers)["x-request-id"]
        self.assertTrue(is_made_id(made), made)
        self.server.wait_for_log(lambda line: line.get("request_id") == made,
                                 what="the 400's access line with its request ID")

    def test_query_total_is_negative_plus_maybe_plus_head_lookups_plus_bypasses(self):
        # MEMBERS are maybes, LATER (added after the snapshot's version) are
        # head lookups when the filter says absent, NEW mostly negatives.
        items = MEMBERS[:100] + LATER[:150] + NEW[:250]
        response = requests.post(self.server.url + "/v1/default/find-missing",
                                 data=b"".join(items), headers={"Content-Type": OCTETS},
                                 timeout=30)
        self.assertEqual(response.status_code, 200, response.text)
        self.assertEqual(response.content, b"".join(NEW[:250]))

        def released():
            text = self.metrics()
            total = self.metric("artifact_bloom_query_total", text, tenant="default")
            return text if total is not None and total >= len(items) else None

        text = support.wait_until(released, what="a metrics release counting the batch")
        value = {name: self.metric("artifact_bloom_%s_total" % name, text, tenant="default")
                 for name in ("query", "negative", "maybe", "head_lookup", "filter_bypass")}
        self.assertEqual(value["query"], value["negative"] + value["maybe"] +
                         value["head_lookup"] + value["filter_bypass"], value)
        # What the issue saw: negative + maybe alone falls short by the head lookups.
        self.assertGreater(value["head_lookup"], 0, value)
        self.assertGreaterEqual(value["maybe"], 100)


def shard_files(manifest):
    directory, name = os.path.split(manifest)
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.startswith(name + ".") and f != name)


class StartupRule(unittest.TestCase):
    """One rule for every file a tenant serves from: a snapshot, filter set,
    index or index set that cannot be used stops the server before it
    listens (exit 1, no ready line), naming the tenant and the file. Before
    issue 37 a bad snapshot left it serving 503s while a bad index stopped
    it."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-startup-")
        cls.catalog = support.Catalog(cls.dir)
        cls.catalog.add(MEMBERS)
        cls.catalog.build()
        cls.other = support.Catalog(cls.dir, "other")
        cls.other.add(NEW[:100])
        cls.other.build()

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_refused(self, args, *fragments):
        server = support.Server(*args, expect_failure=True)
        stdout = server.process.stdout.read()
        server.process.stdout.close()
        log = server.log_text()
        server.log.close()
        self.assertEqual(server.returncode, 1, log)
        self.assertEqual(stdout, b"", "a ready line was printed: %r" % stdout)
        self.assertNotIn('"event":"listening"', log)
        self.assertIn("tenant default", log)
        for fragment in fragments:
            self.assertIn(fragment, log)
        return log

    def garbage(self, name):
        path = self.path(name)
        with open(path, "wb") as out:
            out.write(b"ABF1" + b"\0" * 200)
        return path

    def test_every_unusable_snapshot_or_set_exits_1_before_listening(self):
        db = self.catalog.db
        missing = self.path("missing.abf")
        self.assert_refused(["--snapshot", missing, "--db", db], missing)
        damaged = self.garbage("damaged.abf")
        self.assert_refused(["--snapshot", damaged, "--db", db], damaged)
        # Another catalog's snapshot: not what this catalog holds.
        self.assert_refused(["--snapshot", self.other.snapshot, "--db", db],
                            "catalog_mismatch", self.other.snapshot)
        # A keyed snapshot without its key.
        key = self.path("tenant.key")
        support.run_abf("key", "generate", "--output", key)
        keyed = support.Catalog(self.dir, "keyed", key_file=key)
        keyed.add(MEMBERS[:50])
        keyed.build()
        self.assert_refused(["--snapshot", keyed.snapshot, "--db", keyed.db], "key_required")
        # A filter set with a shard gone.
        manifest = self.path("set.abfs")
        support.run_abf("build", "--from-catalog", db, "--expected-items", 20000, "--fpp", 0.01,
                        "--shards", 3, "--output", manifest)
        shards = shard_files(manifest)
        self.assertEqual(len(shards), 3, shards)
        os.unlink(shards[1])
        self.assert_refused(["--snapshot", manifest, "--db", db], manifest)

    def test_every_unusable_index_or_index_set_exits_1_before_listening(self):
        db = self.catalog.db
        base = ["--snapshot", self.catalog.snapshot, "--db", db, "--index"]
        missing = self.path("missing.abfx")
        self.assert_refused(base + [missing], missing)
        damaged = self.garbage("damaged.abfx")
        self.assert_refused(base + [damaged], damaged)
        other = self.path("other.abfx")
        support.run_abf("index", "--db", self.other.db, "-o", other)
        self.assert_refused(base + [other], "catalog_mismatch", other)
        index_set = self.path("index.abxs")
        support.run_abf("index", "--db", db, "--shards", 3, "-o", index_set)
        shards = shard_files(index_set)
        self.assertEqual(len(shards), 3, shards)
        os.unlink(shards[2])
        self.assert_refused(base + [index_set], index_set)

    def test_a_token_file_of_the_wrong_mode_names_its_own_error(self):
        tokens = support.write_private(self.path("tokens"), "token-aaaaaaaaaaaaaaaa default\n")
        os.chmod(tokens, 0o644)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--token-file", tokens, expect_failure=True)
        server.process.stdout.close()
        log = server.log_text()
        server.log.close()
        self.assertEqual(server.returncode, 1, log)
        self.assertIn(tokens + ": the token file may be read or written by its group or others "
                      "(mode 644); chmod 600 it", log)
        # It said invalid_key, a key file's error, before issue 37.
        self.assertNotIn("invalid_key", log)

    def test_the_documented_systemd_unit_lets_follow_write_the_snapshots(self):
        docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                            "serve.md")
        with open(docs) as text:
            body = text.read()
        unit = body[body.index("# /etc/systemd/system/abf-serve.service"):]
        unit = unit[:unit.index("```")]
        settings = {}
        for line in unit.splitlines():
            if "=" in line and not line.startswith("#"):
                name, _, value = line.partition("=")
                settings.setdefault(name.strip(), []).extend(value.split())
        # The snapshots of the documented config file live in /var/lib/abf,
        # where --follow writes them: never read-only, and writable under
        # ProtectSystem=strict.
        config = json.loads(body[body.index('{\n  "listen"'):body.index("\n}\n") + 2])
        folders = {os.path.dirname(t["snapshot"]) for t in config["tenants"]}
        self.assertEqual(folders, {"/var/lib/abf"})
        self.assertEqual(settings.get("ProtectSystem"), ["strict"])
        for folder in folders:
            self.assertNotIn(folder, settings.get("ReadOnlyPaths", []))
            self.assertIn(folder, settings.get("ReadWritePaths", []))


class IndexReloads(unittest.TestCase):
    """index_published is logged when a reload brings another index, not
    at every reload that re-reads the same one."""

    def test_index_published_only_when_the_index_changed(self):
        directory = support.temp_dir(self, "abf-serve-index-reload-")
        catalog = support.Catalog(directory)
        catalog.add(MEMBERS)
        catalog.build()
        index = os.path.join(directory, "catalog.abfx")
        support.run_abf("index", "--db", catalog.db, "-o", index)
        server = support.Server("--snapshot", catalog.snapshot, "--db", catalog.db,
                                "--index", index)
        try:
            def reload():
                response = requests.post(server.url + "/admin/reload", timeout=60)
                self.assertEqual(response.status_code, 200, response.text)

            def events(name):
                return [line for line in server.log_lines() if line.get("event") == name]

            self.assertEqual(len(events("index_published")), 1)  # at start
            reload()
            reload()
            # Each reload answered after its index and snapshot were read.
            self.assertEqual(len(events("snapshot_published")), 3)
            self.assertEqual(len(events("index_published")), 1, server.log_text())
            catalog.add(NEW[:20])
            support.run_abf("index", "--db", catalog.db, "-o", index)
            reload()
            published = events("index_published")
            self.assertEqual(len(published), 2, server.log_text())
            self.assertEqual(published[-1]["catalog_version"], catalog.version)
            self.assertEqual(published[-1]["digests"], len(MEMBERS) + 20)
            response = requests.post(server.url + "/v1/default/find-missing",
                                     data=b"".join(NEW[:30]), headers={"Content-Type": OCTETS},
                                     timeout=30)
            self.assertEqual(response.content, b"".join(NEW[20:30]))
        finally:
            self.assertEqual(server.stop(), 0)

if __name__ == "__main__":
    unittest.main(verbosity=2)
