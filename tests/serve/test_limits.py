"""`abf serve`'s limits and what they reveal (issue 33): the command line
refuses a 0 for the limits the configuration file refuses it for (exit 2,
as docs/cli.md says for any value out of range; it silently kept the
default before); health probes from an address past its
max_connections_per_client are still answered, within a bound; and a
keyed tenant's single-digest request asks the catalog whatever the filter
answers, so its response time does not tell `maybe` from `absent` (the
mechanism is tested here through the released counters; the timing itself
is measured by server/bench/keyed_timing.py, docs/serve.md)."""

import json
import os
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

MEMBERS = support.digests("member", 2000)
TOKENS = {"a": "limits-token-tenant-a-0123456789", "metrics": "limits-token-metrics-012345678"}


def bearer(token):
    return {"Authorization": "Bearer " + TOKENS[token]}


def poll(condition, deadline_seconds=20, interval=0.05, what="the condition"):
    """Waits for condition() to return a true value, polling; fails past
    the deadline."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %d s waiting for %s" % (deadline_seconds, what))
        time.sleep(interval)


class ZeroLimitsOnTheCommandLine(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-limits-")
        self.catalog = support.Catalog(self.dir, expected_items=1000)
        self.catalog.add(MEMBERS[:10])
        self.catalog.build()

    def test_zero_is_a_usage_error(self):
        for flag in ("--max-digests", "--max-body-bytes", "--http-threads", "--idle-timeout"):
            with self.subTest(flag=flag):
                process = subprocess.Popen(
                    [support.abf_binary(), "serve", "--snapshot", self.catalog.snapshot, "--db",
                     self.catalog.db, "--listen", "127.0.0.1:0", flag, "0"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                try:
                    _, err = process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate(timeout=10)
                    self.fail("abf serve %s 0 started (and kept the default)" % flag)
                self.assertEqual(process.returncode, 2, err.decode())
                self.assertIn(flag, err.decode())
                self.assertIn("'0'", err.decode())
        # 1 is in range: the server starts.
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--max-digests", 1, "--http-threads", 1, "--idle-timeout", 1,
                                "--max-body-bytes", 64)
        self.assertEqual(server.stop(), 0)


class HealthProbesPastThePerClientCap(unittest.TestCase):
    """More idle connections from 127.0.0.1 than max_connections_per_client
    (4 here, 128 by default): /readyz and /healthz from that address are
    still answered on a connection past the cap (one request each, then
    closed), anything else there is 503 too_many_connections, and at most
    two such connections are open at once per address."""

    CAP = 4

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-probes-")
        catalog = support.Catalog(self.dir, expected_items=1000)
        catalog.add(MEMBERS[:10])
        catalog.build()
        config = {"tenants": [{"name": "default", "snapshot": "catalog.abf", "db": "catalog.db"}],
                  "limits": {"max_connections_per_client": self.CAP,
                             "request_timeout_seconds": 3, "idle_timeout_seconds": 60}}
        path = os.path.join(self.dir, "serve.json")
        with open(path, "w") as out:
            json.dump(config, out)
        self.server = support.Server("--config", path)
        self.host, port = self.server.http.rsplit(":", 1)
        self.port = int(port)
        self.held = []
        self.addCleanup(self.close_held)

    def close_held(self):
        for connection in self.held:
            connection.close()
        self.assertEqual(self.server.stop(), 0)

    def connect(self):
        connection = socket.create_connection((self.host, self.port), timeout=10)
        self.held.append(connection)
        return connection

    def request(self, path, method="GET", body=b""):
        """One request on a new connection; (status, body, closed after)."""
        connection = self.connect()
        head = "%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)
        if body:
            head += "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n" % len(body)
        connection.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
        header, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = connection.recv(65536)
            if not chunk:
                break
            rest += chunk
        status = int(header.split(b" ")[1]) if header else None
        closed = b"connection: close" in header.lower()
        if closed:
            # The server forgets the connection (frees its probe slot)
            # before it closes the socket: the end of the stream is the
            # event the next probe waits for.
            while connection.recv(65536):
                pass
            connection.close()
            self.held.remove(connection)
        return status, rest, closed

    def fill_the_cap(self):
        """CAP idle keep-alive connections, each once answered (so each is
        counted by the server before the next test connection)."""
        for _ in range(self.CAP):
            status, _, closed = self.request("/healthz")
            self.assertEqual((status, closed), (200, False))

    def test_probes_are_answered_past_the_cap(self):
        self.fill_the_cap()
        for path in ("/readyz", "/healthz", "/readyz"):
            status, body, closed = self.request(path)
            self.assertEqual(status, 200, body)
            self.assertTrue(closed, "a probe-only connection closes after its answer")
        status, body, _ = self.request("/v1/default/find-missing", "POST", MEMBERS[0])
        self.assertEqual(status, 503, body)
        self.assertEqual(json.loads(body)["error"]["code"], "too_many_connections")
        status, body, _ = self.request("/v1/default/blobs/sha256:" + MEMBERS[0].hex())
        self.assertEqual(status, 503, body)

    def test_the_probe_connections_are_bounded(self):
        self.fill_the_cap()
        # Two probe-only connections held open without a request: the next
        # connection from the address is refused at once, even for /readyz.
        silent = [self.connect(), self.connect()]

        def refused():
            """A new connection that sends nothing: a refused one gets the
            503 at once (then the end of the stream); one let in as a probe
            gets nothing and is closed at its 3 s deadline."""
            connection = self.connect()
            connection.settimeout(30)
            data = b""
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
            return (data.startswith(b"HTTP/1.1 503") and
                    b'"code":"too_many_connections"' in data.replace(b" ", b""))

        # Accepted in order, the two silent ones are counted before the
        # third; poll in case the kernel hands them over out of order.
        poll(refused, what="a connection past the probe slots to be refused")
        # A silent probe connection is closed at its request deadline (3 s),
        # which frees its slot.
        for connection in silent:
            connection.settimeout(30)
            self.assertEqual(connection.recv(65536)[:12] in (b"", b"HTTP/1.1 408"), True)
        poll(lambda: self.request("/readyz")[0] == 200, what="a probe slot to be free again")


class KeyedSingleDigestLookups(unittest.TestCase):
    """A keyed tenant's single-digest request asks the catalog about its
    digest whatever the filter answers (so absent and maybe cost the same);
    a batch of more still asks only about the filter's maybes."""

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-keyed-")
        key = os.path.join(self.dir, "a.key")
        support.run_abf("key", "generate", "-o", key)
        self.catalog = support.Catalog(self.dir, "a", expected_items=5000, fpp=0.3, key_file=key)
        self.catalog.add(MEMBERS)
        self.catalog.build()
        support.write_private(os.path.join(self.dir, "tokens"),
                              "%(a)s a\n%(metrics)s @metrics\n" % TOKENS)
        config = {"token_file": "tokens",
                  "tenants": [{"name": "a", "snapshot": "a.abf", "db": "a.db",
                               "key_file": "a.key"}],
                  "metrics_release": {"interval_seconds": 1, "min_missing_digests": 100}}
        path = os.path.join(self.dir, "serve.json")
        with open(path, "w") as out:
            json.dump(config, out)
        self.server = support.Server("--config", path)
        self.session = requests.Session()
        self.addCleanup(self.stop)

    def stop(self):
        self.session.close()
        self.assertEqual(self.server.stop(), 0)

    def released(self, queries):
        """The released counters once they hold `queries` queries."""
        def counters():
            text = self.session.get(self.server.url + "/metrics", headers=bearer("metrics"),
                                    timeout=10).text
            values = {name: support.metric(text, "artifact_bloom_%s_total" % name, tenant="a")
                      for name in ("query", "negative", "maybe", "exact_lookup")}
            return values if values["query"] == queries else None
        return poll(counters, deadline_seconds=30, interval=0.2,
                    what="a metrics release of %d queries" % queries)

    def test_every_single_digest_is_looked_up(self):
        singles = support.digests("single", 200)  # all missing
        for d in singles:
            response = self.session.head(self.server.url + "/v1/a/blobs/sha256:" + d.hex(),
                                         headers=bearer("a"), timeout=10)
            self.assertEqual(response.status_code, 404)
        counts = self.released(len(singles))
        self.assertGreater(counts["negative"], 0)  # the filter said absent for most ...
        self.assertEqual(counts["exact_lookup"], len(singles))  # ... and each was looked up
        self.assertEqual(counts["negative"] + counts["maybe"], len(singles))
        # A batch of 200 missing digests: only the filter's maybes are asked.
        batch = support.digests("batch", 200)
        response = self.session.post(
            self.server.url + "/v1/a/find-missing", data=b"".join(batch),
            headers=dict(bearer("a"), **{"Content-Type": "application/octet-stream"}),
            timeout=10)
        self.assertEqual(len(response.content), 32 * len(batch))
        after = self.released(len(singles) + len(batch))
        self.assertEqual(after["exact_lookup"] - counts["exact_lookup"],
                         after["maybe"] - counts["maybe"])
        self.assertLess(after["exact_lookup"] - counts["exact_lookup"], len(batch))


if __name__ == "__main__":
    unittest.main(verbosity=2)
