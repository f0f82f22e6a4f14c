"""`abf serve` over HTTP/1.1: real server processes on 127.0.0.1 driven by
curl and python3-requests, every answer checked against the catalog's SQLite
file; bad input of every kind gets its status and JSON error, and the server
keeps serving."""

import json
import os
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

MEMBERS = support.digests("member", 3000)
LATER = support.digests("later", 500)          # added at version 2
REMOVED = MEMBERS[:100]                        # removed at version 3
NEW = support.digests("new", 3000)             # never in the catalog


def bearer(token):
    return {"Authorization": "Bearer " + token}


class SingleTenant(unittest.TestCase):
    """One tenant from flags, no authentication."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-http-")
        cls.catalog = support.Catalog(cls.dir)
        cls.catalog.add(MEMBERS)
        cls.catalog.add(LATER)
        cls.catalog.remove(REMOVED)
        cls.catalog.build()  # version 3
        cls.server = support.Server("--snapshot", cls.catalog.snapshot, "--db", cls.catalog.db,
                                    "--max-body-bytes", 1 << 20, "--max-digests", 20000)
        cls.truth = support.Truth(cls.catalog.db)
        cls.session = requests.Session()

    @classmethod
    def tearDownClass(cls):
        cls.session.close()
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def post(self, body, content_type, **kwargs):
        headers = {"Content-Type": content_type}
        headers.update(kwargs.pop("headers", {}))
        return self.session.post(self.server.url + "/v1/default/find-missing", data=body,
                                 headers=headers, timeout=30, **kwargs)

    def assert_error(self, response, status, code):
        self.assertEqual(response.status_code, status, response.text)
        self.assertEqual(response.headers["Content-Type"], "application/json")
        body = response.json()
        self.assertEqual(body["error"]["code"], code, body)
        self.assertTrue(body["error"]["message"])
        return body

    def assert_still_serving(self):
        response = self.session.head(self.server.url + "/v1/default/blobs/sha256:" +
                                     MEMBERS[500].hex(), timeout=10)
        self.assertEqual(response.status_code, 200)

    def mixed(self):
        # Members, later additions, removed ones and new ones, interleaved.
        items = []
        for i in range(400):
            items += [MEMBERS[100 + i], NEW[i], LATER[i % 500], REMOVED[i % 100], NEW[1000 + i]]
        return items

    # --- the three encodings, checked against SQLite -------------------------

    def test_binary_batch_is_exact_in_input_order(self):
        items = self.mixed()
        response = self.post(b"".join(items), "application/octet-stream")
        self.assertEqual(response.status_code, 200, response.text)
        self.assertEqual(response.headers["Content-Type"], "application/octet-stream")
        version = int(response.headers["X-Abf-Catalog-Version"])
        self.assertEqual(version, 3)
        body = response.content
        got = [body[i:i + 32] for i in range(0, len(body), 32)]
        self.assertEqual(got, self.truth.missing(items, version))
        self.assertEqual(int(response.headers["X-Abf-Missing-Count"]), len(got))

    def test_text_batch_takes_hex_and_prefixed_lines(self):
        items = self.mixed()[:500]
        lines = []
        for i, d in enumerate(items):
            form = i % 4
            if form == 0:
                lines.append(d.hex())
            elif form == 1:
                lines.append("sha256:" + d.hex().upper())
            elif form == 2:
                lines.append(" \t" + d.hex() + "\t ")
            else:
                lines.append("SHA256:" + d.hex())
            if i % 50 == 0:
                lines.append("   ")  # blank lines are skipped
        response = self.post("\r\n".join(lines) + "\n", "text/plain; charset=utf-8")
        self.assertEqual(response.status_code, 200, response.text)
        version = int(response.headers["X-Abf-Catalog-Version"])
        expected = "".join(d.hex() + "\n" for d in self.truth.missing(items, version))
        self.assertEqual(response.text, expected)

    def test_json_batch(self):
        items = self.mixed()[:700]
        response = self.post(json.dumps({"digests": ["sha256:" + d.hex() for d in items]}),
                             "application/json")
        self.assertEqual(response.status_code, 200, response.text)
        body = response.json()
        self.assertEqual(body["catalog_version"], 3)
        self.assertEqual(body["missing"],
                         ["sha256:" + d.hex() for d in self.truth.missing(items, 3)])

    def test_empty_batches_answer_empty(self):
        for body, content_type in ((b"", "application/octet-stream"), ("\n\n", "text/plain"),
                                   ('{"digests": []}', "application/json")):
            response = self.post(body, content_type)
            self.assertEqual(response.status_code, 200, response.text)
        self.assertEqual(response.json()["missing"], [])

    def test_repeats_are_answered_each_time(self):
        items = [NEW[5], MEMBERS[200], NEW[5], NEW[5]]
        response = self.post(b"".join(items), "application/octet-stream")
        self.assertEqual(response.content, NEW[5] * 3)

    def test_curl_forms(self):
        url = self.server.url
        present = MEMBERS[700].hex()
        absent = NEW[7].hex()

        def curl(*args, stdin=None):
            result = subprocess.run(["curl", "-sS", "--max-time", "20"] + list(args), input=stdin,
                                    capture_output=True, timeout=30)
            self.assertEqual(result.returncode, 0, result.stderr)
            return result.stdout

        code = curl("-o", "/dev/null", "-w", "%{http_code}", "-I",
                    url + "/v1/default/blobs/sha256:" + present)
        self.assertEqual(code, b"200")
        code = curl("-o", "/dev/null", "-w", "%{http_code}", "-I",
                    url + "/v1/default/blobs/sha256:" + absent)
        self.assertEqual(code, b"404")
        # Removed at version 3: missing at the snapshot's version.
        code = curl("-o", "/dev/null", "-w", "%{http_code}", "-I",
                    url + "/v1/default/blobs/sha256:" + REMOVED[3].hex())
        self.assertEqual(code, b"404")
        body = json.loads(curl(url + "/v1/default/blobs/sha256:" + present.upper()))
        self.assertEqual(body, {"digest": "sha256:" + present, "present": True,
                                "catalog_version": 3})
        code = curl("-o", "/dev/null", "-w", "%{http_code}", url + "/v1/default/blobs/sha256:abc")
        self.assertEqual(code, b"400")
        text = curl("-H", "Content-Type: text/plain", "--data-binary", "@-",
                    url + "/v1/default/find-missing",
                    stdin=("%s\nsha256:%s\n" % (present, absent)).encode())
        self.assertEqual(text, (absent + "\n").encode())
        binary = curl("-H", "Content-Type: application/octet-stream", "--data-binary", "@-",
                      url + "/v1/default/find-missing", stdin=MEMBERS[700] + NEW[7])
        self.assertEqual(binary, NEW[7])
        answer = json.loads(curl("-H", "Content-Type: application/json", "--data-binary",
                                 '{"digests":["sha256:%s","sha256:%s"]}' % (present, absent),
                                 url + "/v1/default/find-missing"))
        self.assertEqual(answer["missing"], ["sha256:" + absent])
        self.assertEqual(curl(url + "/healthz"), b'{"status":"ok"}\n')
        self.assertTrue(json.loads(curl(url + "/readyz"))["ready"])

    def test_every_digest_of_the_catalog_answers_by_blob(self):
        # Single-blob answers for a sample of every kind, on one keep-alive connection.
        for d in MEMBERS[100:400:7] + NEW[:60] + LATER[:40] + REMOVED[:40]:
            response = self.session.head(self.server.url + "/v1/default/blobs/sha256:" + d.hex(),
                                         timeout=10)
            self.assertEqual(response.status_code, 200 if self.truth.exists(d, 3) else 404)
            self.assertEqual(response.headers["X-Abf-Catalog-Version"], "3")

    # --- bad input: a specific status and JSON error each --------------------

    def test_malformed_digests(self):
        body = self.assert_error(self.post(MEMBERS[0].hex() + "\nnot-a-digest\n", "text/plain"),
                                 400, "invalid_digest")
        self.assertIn("line 2", body["error"]["message"])
        # One digest a line: a second word is refused, never dropped as a
        # sha256sum name, and so is a sha256sum -z body (issue 22).
        for text, line in ((MEMBERS[0].hex() + "\n" + NEW[0].hex() + "  " + NEW[1].hex() + "\n",
                            "line 2"),
                           (NEW[0].hex() + "  a\0" + NEW[1].hex() + "  b\0", "line 1")):
            body = self.assert_error(self.post(text, "text/plain"), 400, "invalid_digest")
            self.assertIn(line, body["error"]["message"])
        body = self.assert_error(
            self.post(json.dumps({"digests": ["sha256:" + NEW[0].hex(), "sha256:12"]}),
                      "application/json"), 400, "invalid_digest")
        self.assertIn("digests[1]", body["error"]["message"])
        self.assert_error(self.post(json.dumps({"digests": ["md5:" + "0" * 32]}),
                                    "application/json"), 400, "invalid_digest")
        self.assert_error(self.post(json.dumps({"digests": [7]}), "application/json"), 400,
                          "invalid_digest")
        for blob in ("sha256:" + "g" * 64, "sha256:" + "0" * 63, "md5:" + "0" * 32, "0" * 64,
                     "sha512:" + "0" * 128):
            response = self.session.get(self.server.url + "/v1/default/blobs/" + blob, timeout=10)
            self.assert_error(response, 400, "invalid_digest")
            response = self.session.head(self.server.url + "/v1/default/blobs/" + blob, timeout=10)
            self.assertEqual(response.status_code, 400)  # never 404
        self.assert_still_serving()

    def test_bad_encodings(self):
        body = self.assert_error(self.post(b"\x00" * 33, "application/octet-stream"), 400,
                                 "truncated_record")
        self.assertIn("offset 32", body["error"]["message"])
        self.assert_error(self.post('{"digests": [', "application/json"), 400, "invalid_json")
        self.assert_error(self.post('["sha256:00"]', "application/json"), 400, "invalid_request")
        self.assert_error(self.post('{"digest": []}', "application/json"), 400, "invalid_request")
        self.assert_error(self.post(b"\xff\xfe garbage", "text/plain"), 400, "invalid_digest")
        self.assert_error(self.post(b"x", "application/x-www-form-urlencoded"), 415,
                          "unsupported_media_type")
        response = self.session.post(self.server.url + "/v1/default/find-missing", data=b"",
                                     headers={"Content-Type": ""}, timeout=10)
        self.assert_error(response, 415, "unsupported_media_type")
        self.assert_still_serving()

    def test_limits(self):
        # 20,000 digests a request (--max-digests); the body limit (1 MiB) is 32,768 records.
        self.assert_error(self.post(b"\x01" * 32 * 20001, "application/octet-stream"), 413,
                          "too_many_digests")
        response = self.post(b"\x01" * 32 * 20000, "application/octet-stream")
        self.assertEqual(response.status_code, 200)
        self.assert_error(self.post(b"\x01" * ((1 << 20) + 32), "application/octet-stream"), 413,
                          "body_too_large")
        self.assert_still_serving()
        # A header block over max_header_bytes (8192 by default).
        response = self.session.get(self.server.url + "/healthz",
                                    headers={"X-Big": "a" * 4000, "X-Big2": "b" * 4000,
                                             "X-Big3": "c" * 1000}, timeout=10)
        self.assert_error(response, 431, "headers_too_large")
        self.assert_still_serving()

    def test_unknown_paths_and_methods(self):
        self.assert_error(self.session.get(self.server.url + "/v2/", timeout=10), 404, "not_found")
        self.assert_error(self.session.get(self.server.url + "/v1/default/find-missing",
                                           timeout=10), 405, "method_not_allowed")
        self.assert_error(self.session.delete(self.server.url + "/v1/default/blobs/sha256:" +
                                              "0" * 64, timeout=10), 405, "method_not_allowed")
        self.assert_error(self.session.get(self.server.url + "/v1/nobody/blobs/sha256:" + "0" * 64,
                                           timeout=10), 404, "unknown_tenant")
        self.assert_error(self.session.get(self.server.url + "/v1/.hidden/blobs/sha256:" + "0" * 64,
                                           timeout=10), 400, "invalid_tenant")
        self.assert_still_serving()

    def test_truncated_body_and_idle_connections(self):
        host, port = self.server.http.rsplit(":", 1)
        # A body shorter than its Content-Length, then the client goes away.
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/octet-stream\r\nContent-Length: 6400\r\n\r\n" +
                         b"\x00" * 100)
        # A request line the server cannot parse.
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"NONSENSE\r\n\r\n")
            reply = sock.recv(4096)
            self.assertTrue(reply.startswith(b"HTTP/1.1 400"), reply)
        self.assert_still_serving()
        response = self.post(b"".join(MEMBERS[200:210]), "application/octet-stream")
        self.assertEqual(response.content, b"")

    def test_metrics(self):
        # The request counts are written after the answer: sync() waits for them.
        connection = support.Connection(self.server)
        try:
            status, _, _ = connection.request("POST", "/v1/default/find-missing",
                                              b"".join(NEW[:100]),
                                              {"Content-Type": "application/octet-stream"})
            self.assertEqual(status, 200)
            connection.sync()
        finally:
            connection.close()
        text = self.session.get(self.server.url + "/metrics", timeout=10).text
        # The query counters wait for their release (60 s and 1000 missing
        # digests by default: test_ops.py); the exact counts are live.
        self.assertEqual(support.metric(text, "artifact_bloom_query_total", tenant="default"), 0)
        self.assertEqual(support.metric(text, "artifact_bloom_catalog_version", tenant="default"), 3)
        self.assertEqual(support.metric(text, "artifact_bloom_serve_snapshot_ready", tenant="default"), 1)
        self.assertGreaterEqual(support.metric(text, "artifact_bloom_serve_requests_total", front="http",
                                               tenant="default", status="200"), 1)
        self.assertGreaterEqual(support.metric(text, "artifact_bloom_serve_digests_total", tenant="default"),
                                100)

    def test_access_log_has_no_digests_at_info(self):
        d = NEW[2999]
        connection = support.Connection(self.server)
        try:
            status, _, _ = connection.request("HEAD", "/v1/default/blobs/sha256:" + d.hex())
            self.assertEqual(status, 404)
            status, _, _ = connection.request("POST", "/v1/default/find-missing", d,
                                              {"Content-Type": "application/octet-stream"})
            self.assertEqual(status, 200)
            # Both access lines are written once this is answered.
            connection.sync()
        finally:
            connection.close()
        log = self.server.log_text()
        self.assertNotIn(d.hex(), log)
        lines = [line for line in self.server.log_lines() if line.get("event") == "request"]
        self.assertTrue([line for line in lines if line.get("method") == "HEAD"])
        self.assertTrue([line for line in lines if line.get("method") == "POST"])
        for line in lines:
            for key in ("tenant", "digests", "missing", "maybes", "status", "us"):
                self.assertIn(key, line)


class Tenants(unittest.TestCase):
    """Two tenants from a config file, bearer tokens, rate limits, TLS."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-tenants-")
        cls.a = support.Catalog(cls.dir, "a")
        cls.b = support.Catalog(cls.dir, "b")
        cls.shared = support.digests("shared", 200)
        cls.only_b = support.digests("only-b", 300)
        cls.a.add(MEMBERS[:1000] + cls.shared)
        cls.b.add(cls.only_b + cls.shared)
        cls.b.add(support.digests("b-later", 10))
        cls.a.build()
        cls.b.build()
        cls.tokens = {"a": "token-for-tenant-a-0123456789", "b": "token-for-tenant-b-0123456789",
                      "all": "token-for-every-tenant-01234", "admin": "admin-token-0123456789abcd",
                      "slow": "rate-limited-token-0123456789",
                      "bulk": "digest-limited-token-0123456"}
        support.write_private(os.path.join(cls.dir, "tokens"), (
            "# tokens of the test\n"
            "%(a)s a\n%(b)s b\n%(all)s *\n%(admin)s @admin\n%(slow)s a\n%(bulk)s b\n") % cls.tokens)
        config = {
            "listen": "127.0.0.1:0",
            "token_file": "tokens",
            "tenants": [{"name": "a", "snapshot": "a.abf", "db": "a.db"},
                        {"name": "b", "snapshot": "b.abf", "db": "b.db"}],
            "limits": {"max_header_bytes": 4096, "max_digests_per_request": 5000},
            "rate_limit": {"requests_per_second": 50, "digests_per_second": 200000,
                           "burst_seconds": 1},
        }
        cls.config = os.path.join(cls.dir, "serve.json")
        with open(cls.config, "w") as out:
            json.dump(config, out)
        # The config's listen is overridden by the harness's --listen 127.0.0.1:0.
        cls.server = support.Server("--config", cls.config)
        cls.session = requests.Session()

    @classmethod
    def tearDownClass(cls):
        cls.session.close()
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def ask(self, tenant, token, items, extra_headers=None):
        headers = {"Content-Type": "application/octet-stream"}
        if token is not None:
            headers.update(bearer(token))
        headers.update(extra_headers or {})
        return self.session.post(self.server.url + "/v1/%s/find-missing" % tenant,
                                 data=b"".join(items), headers=headers, timeout=30)

    def assert_error(self, response, status, code):
        self.assertEqual(response.status_code, status, response.text)
        self.assertEqual(response.json()["error"]["code"], code)

    def test_each_tenant_answers_from_its_own_catalog(self):
        items = self.shared[:50] + self.only_b[:50] + MEMBERS[:50]
        truth_a = support.Truth(self.a.db)
        truth_b = support.Truth(self.b.db)
        response = self.ask("a", self.tokens["a"], items)
        self.assertEqual(response.status_code, 200, response.text)
        version = int(response.headers["X-Abf-Catalog-Version"])
        self.assertEqual(response.content, b"".join(truth_a.missing(items, version)))
        # Everything only B holds is missing for A.
        self.assertIn(b"".join(self.only_b[:50]), response.content)
        response = self.ask("b", self.tokens["b"], items)
        version = int(response.headers["X-Abf-Catalog-Version"])
        self.assertEqual(version, 2)
        self.assertEqual(response.content, b"".join(truth_b.missing(items, version)))
        response = self.ask("b", self.tokens["all"], items)
        self.assertEqual(response.content, b"".join(truth_b.missing(items, 2)))

    def test_tokens(self):
        items = self.shared[:3]
        self.assert_error(self.ask("a", None, items), 401, "unauthenticated")
        self.assert_error(self.ask("a", "wrong-token-wrong-token-xx", items), 401, "invalid_token")
        self.assert_error(self.ask("a", self.tokens["a"] + "x", items), 401, "invalid_token")
        self.assert_error(self.ask("a", None, items, {"Authorization": "Basic YTpi"}), 401,
                          "invalid_authorization")
        # A's token asking about B, and about a tenant that does not exist:
        # both 403, so the token learns nothing of other tenants.
        self.assert_error(self.ask("b", self.tokens["a"], items), 403, "forbidden")
        self.assert_error(self.ask("c", self.tokens["a"], items), 403, "forbidden")
        self.assert_error(self.ask("c", self.tokens["all"], items), 404, "unknown_tenant")
        response = self.session.head(self.server.url + "/v1/b/blobs/sha256:" + self.only_b[0].hex(),
                                     headers=bearer(self.tokens["a"]), timeout=10)
        self.assertEqual(response.status_code, 403)
        response = self.session.head(self.server.url + "/v1/b/blobs/sha256:" + self.only_b[0].hex(),
                                     headers=bearer(self.tokens["b"]), timeout=10)
        self.assertEqual(response.status_code, 200)
        # The admin token reloads but asks no tenant; tenant tokens may not reload.
        self.assert_error(self.ask("a", self.tokens["admin"], items), 403, "forbidden")
        response = self.session.post(self.server.url + "/admin/reload",
                                     headers=bearer(self.tokens["a"]), timeout=30)
        self.assert_error(response, 403, "forbidden")
        response = self.session.post(self.server.url + "/admin/reload", timeout=30)
        self.assert_error(response, 401, "unauthenticated")
        response = self.session.post(self.server.url + "/admin/reload",
                                     headers=bearer(self.tokens["admin"]), timeout=30)
        self.assertEqual(response.status_code, 200, response.text)
        self.assertTrue(response.json()["ok"])
        # The server keeps serving.
        self.assertEqual(self.ask("a", self.tokens["a"], items).status_code, 200)

    def test_header_limit_from_config(self):
        response = self.session.get(self.server.url + "/healthz", headers={"X-Pad": "p" * 5000},
                                    timeout=10)
        self.assert_error(response, 431, "headers_too_large")

    def test_readyz_and_metrics_per_tenant(self):
        # Without a token that may read operations, /readyz says only ready.
        body = self.session.get(self.server.url + "/readyz", timeout=10).json()
        self.assertEqual(body, {"ready": True})
        admin = bearer(self.tokens["admin"])
        body = self.session.get(self.server.url + "/readyz", headers=admin, timeout=10).json()
        no_lag = {"head_version": None, "versions": 0, "digests_added": 0}
        self.assertEqual(body, {"ready": True, "tenants": {
            "a": {"ready": True, "catalog_version": 1, "lag": dict(no_lag, head_version=1)},
            "b": {"ready": True, "catalog_version": 2, "lag": dict(no_lag, head_version=2)}}})
        self.assertEqual(self.session.get(self.server.url + "/metrics", timeout=10).status_code,
                         401)
        text = self.session.get(self.server.url + "/metrics", headers=admin, timeout=10).text
        self.assertEqual(support.metric(text, "artifact_bloom_catalog_version", tenant="a"), 1)
        self.assertEqual(support.metric(text, "artifact_bloom_catalog_version", tenant="b"), 2)
        # Requests that named no tenant the caller may see are counted without one.
        self.ask("zzz", self.tokens["a"], self.shared[:1])
        text = self.session.get(self.server.url + "/metrics", headers=admin, timeout=10).text
        self.assertNotIn('tenant="zzz"', text)


class RateLimits(unittest.TestCase):
    """Per-token buckets, on a server of their own with rates so low that
    any client, on any machine, asks faster than they refill: 10 requests
    and 20,000 digests a burst, refilled at 0.5 requests and 1,000 digests a
    second. (At 50 requests and 200,000 digests a second, a client on a
    busy 2-core machine sent 60 batches of 5,000 in a row and got 60 200s.)"""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-rates-")
        cls.a = support.Catalog(cls.dir, "a")
        cls.a.add(MEMBERS[:100])
        cls.a.build()
        cls.tokens = {"a": "rates-token-tenant-a-012345", "slow": "rates-token-requests-0123",
                      "bulk": "rates-token-digests-01234"}
        support.write_private(os.path.join(cls.dir, "tokens"),
                              "%(a)s a\n%(slow)s a\n%(bulk)s a\n" % cls.tokens)
        config = os.path.join(cls.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"token_file": "tokens",
                       "tenants": [{"name": "a", "snapshot": "a.abf", "db": "a.db"}],
                       "limits": {"max_digests_per_request": 5000},
                       "rate_limit": {"requests_per_second": 0.5, "digests_per_second": 1000,
                                      "burst_seconds": 20}}, out)
        cls.server = support.Server("--config", config)
        cls.session = requests.Session()

    @classmethod
    def tearDownClass(cls):
        cls.session.close()
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def ask(self, token, items):
        return self.session.post(self.server.url + "/v1/a/find-missing", data=b"".join(items),
                                 headers=dict(bearer(self.tokens[token]), **{
                                     "Content-Type": "application/octet-stream"}), timeout=30)

    def first_refusal(self, token, items, most):
        """The statuses up to the first 429 (at most `most` requests) and it."""
        statuses = []
        for _ in range(most):
            response = self.ask(token, items)
            statuses.append(response.status_code)
            if response.status_code == 429:
                return statuses, response
        self.fail("no 429 in %d requests: %s" % (most, statuses))

    def test_rate_limit_answers_429_with_retry_after(self):
        # The 11th request a burst, unless the client took 2 s a request.
        statuses, response = self.first_refusal("slow", MEMBERS[:1], 40)
        self.assertEqual(set(statuses[:-1]), {200})
        self.assertGreaterEqual(len(statuses), 11)
        body = response.json()["error"]
        self.assertEqual(body["code"], "rate_limited")
        self.assertIn("requests per second", body["message"])
        self.assertGreaterEqual(int(response.headers["Retry-After"]), 1)
        # Other tokens have buckets of their own.
        self.assertEqual(self.ask("a", MEMBERS[:1]).status_code, 200)

    def test_digest_rate_limit(self):
        # Four 5,000-digest batches empty the bucket, the fifth takes it into
        # debt and the next is refused (unless the client took 5 s a batch),
        # before the request bucket (10) runs out.
        statuses, response = self.first_refusal("bulk", support.digests("rate", 5000), 20)
        self.assertEqual(statuses[0], 200)
        self.assertGreaterEqual(len(statuses), 6)
        body = response.json()["error"]
        self.assertEqual(body["code"], "rate_limited")
        self.assertIn("digests per second", body["message"])


class Startup(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-start-")
        self.catalog = support.Catalog(self.dir)
        self.catalog.add(MEMBERS[:100])
        self.catalog.build()

    def test_token_file_readable_by_others_is_refused(self):
        tokens = support.write_private(os.path.join(self.dir, "tokens"),
                                       "token-0123456789abcdef default\n")
        os.chmod(tokens, 0o644)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--token-file", tokens, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        self.assertIn("chmod 600", server.log_text())
        server.stop()

    def test_bad_config_is_a_clear_error(self):
        config = os.path.join(self.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"tenants": [{"name": "a", "snapshot": "catalog.abf", "db": "catalog.db"}],
                       "limits": {"max_body_byte": 10}}, out)
        server = support.Server("--config", config, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        self.assertIn('unknown key "max_body_byte"', server.log_text())
        server.stop()

    def test_config_listen_is_used_unless_the_flag_is_given(self):
        config = os.path.join(self.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"listen": "127.0.0.1:0", "tenants": [
                {"name": "a", "snapshot": "catalog.abf", "db": "catalog.db"}]}, out)
        server = support.Server("--config", config, listen=False)
        try:
            self.assertNotEqual(server.http.rsplit(":", 1)[1], "8080")
            response = requests.get(server.url + "/v1/a/blobs/sha256:" + MEMBERS[0].hex(),
                                    timeout=10)
            self.assertEqual(response.status_code, 200)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_corrupt_snapshot_at_start_exits_1_and_at_a_reload_keeps_the_old_one(self):
        good = self.catalog.snapshot
        bad = os.path.join(self.dir, "served.abf")
        with open(bad, "wb") as out:
            out.write(b"ABF1" + b"\x00" * 200)
        # At start: exit 1 before listening (it served 503 no_snapshot
        # until a reload before issue 37: one rule now, as for an index).
        server = support.Server("--snapshot", bad, "--db", self.catalog.db, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        self.assertEqual(server.process.stdout.read(), b"")
        server.process.stdout.close()
        self.assertIn("served.abf", server.log_text())
        server.log.close()
        # At a reload: refused, and the old snapshot keeps serving.
        shutil.copy(good, bad)
        server = support.Server("--snapshot", bad, "--db", self.catalog.db)
        try:
            with open(bad + ".tmp", "wb") as out:
                out.write(b"ABF1" + b"\x00" * 200)
            os.rename(bad + ".tmp", bad)
            server.signal(signal.SIGHUP)
            server.wait_for_log(lambda line: line.get("event") == "reload_refused",
                                what="the SIGHUP reload's refusal")
            self.assertEqual(requests.get(server.url + "/readyz", timeout=10).status_code, 200)
            response = requests.post(server.url + "/v1/default/find-missing",
                                     data=MEMBERS[0] + NEW[0],
                                     headers={"Content-Type": "application/octet-stream"},
                                     timeout=10)
            self.assertEqual(response.content, NEW[0])
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_filter_set_tenant_answers_exactly_and_reloads(self):
        # A tenant served from a 4-shard filter set (docs/protocol.md section 13).
        manifest = os.path.join(self.dir, "set.abfs")
        support.run_abf("build", "--from-catalog", self.catalog.db, "--expected-items", 20000,
                        "--fpp", 0.01, "--shards", 4, "--output", manifest)
        server = support.Server("--snapshot", manifest, "--db", self.catalog.db)
        try:
            items = MEMBERS[:100] + NEW[:400] + MEMBERS[100:200]
            url = server.url + "/v1/default/find-missing"
            headers = {"Content-Type": "application/octet-stream"}
            response = requests.post(url, data=b"".join(items), headers=headers, timeout=10)
            self.assertEqual(response.status_code, 200, response.text)
            truth = support.Truth(self.catalog.db)
            version = int(response.headers["X-Abf-Catalog-Version"])
            self.assertEqual(response.content, b"".join(truth.missing(items, version)))
            self.catalog.add(NEW[:50])
            support.run_abf("build", "--from-catalog", self.catalog.db, "--expected-items", 20000,
                            "--fpp", 0.01, "--shards", 4, "--output", manifest)
            server.signal(signal.SIGHUP)
            support.wait_until(
                lambda: requests.get(server.url + "/readyz", timeout=10).json()
                ["tenants"]["default"]["catalog_version"] == self.catalog.version,
                what="the SIGHUP reload of version %d" % self.catalog.version)
            response = requests.post(url, data=b"".join(items), headers=headers, timeout=10)
            self.assertEqual(int(response.headers["X-Abf-Catalog-Version"]), self.catalog.version)
            truth = support.Truth(self.catalog.db)
            self.assertEqual(response.content,
                             b"".join(truth.missing(items, self.catalog.version)))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_keyed_snapshot_needs_its_key(self):
        key = os.path.join(self.dir, "tenant.key")
        support.run_abf("key", "generate", "--output", key)
        keyed = support.Catalog(self.dir, "keyed", key_file=key)
        keyed.add(MEMBERS[:300])
        keyed.build()
        server = support.Server("--snapshot", keyed.snapshot, "--db", keyed.db, "--key-file", key)
        try:
            self.assertTrue(server.ready["tenants_ready"])
            response = requests.post(server.url + "/v1/default/find-missing",
                                     data=MEMBERS[0] + NEW[0] + MEMBERS[299],
                                     headers={"Content-Type": "application/octet-stream"},
                                     timeout=10)
            self.assertEqual(response.content, NEW[0])
        finally:
            self.assertEqual(server.stop(), 0)
        # Without the key the snapshot is refused (key_required): the server
        # does not start (exit 1), with the reason.
        server = support.Server("--snapshot", keyed.snapshot, "--db", keyed.db,
                                expect_failure=True)
        self.assertEqual(server.returncode, 1)
        server.process.stdout.close()
        self.assertIn("key_required", server.log_text())
        server.log.close()

    def test_idle_connection_is_closed(self):
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 1)
        try:
            host, port = server.http.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                start = time.monotonic()
                self.assertEqual(sock.recv(1), b"")  # closed by the server
                self.assertLess(time.monotonic() - start, 8)
            self.assertEqual(requests.get(server.url + "/healthz", timeout=10).status_code, 200)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(self):
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db)
        host, port = server.http.rsplit(":", 1)
        items = MEMBERS[:100] + NEW[:100]
        body = b"".join(items)
        sock = socket.create_connection((host, int(port)), timeout=20)
        try:
            # Headers asking for 100 Continue: the interim answer says the
            # server is reading this request (it is in flight, not an idle
            # connection). Then half the body, SIGTERM, the rest.
            sock.sendall(b"POST /v1/default/find-missing HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/octet-stream\r\nExpect: 100-continue\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body))
            interim = b""
            while b"\r\n\r\n" not in interim:
                chunk = sock.recv(1)
                if not chunk:
                    break
                interim += chunk
            self.assertTrue(interim.startswith(b"HTTP/1.1 100 "), interim)
            sock.sendall(body[:3200])
            server.signal(signal.SIGTERM)

            def refused():
                try:
                    socket.create_connection((host, int(port)), timeout=5).close()
                    return False
                except OSError:
                    return True

            support.wait_until(refused, what="the listener to close after SIGTERM")
            sock.sendall(body[3200:])
            reply = b""
            while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < 3200:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
            head, _, content = reply.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
            self.assertEqual(content, b"".join(NEW[:100]))
        finally:
            sock.close()
        self.assertEqual(server.process.wait(timeout=30), 0)
        server.stop()

    def test_tls(self):
        cert = os.path.join(self.dir, "cert.pem")
        key = os.path.join(self.dir, "key.pem")
        result = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
             cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
             "subjectAltName=IP:127.0.0.1"], capture_output=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--tls-cert", cert, "--tls-key", key)
        try:
            url = "https://" + server.http
            response = requests.post(url + "/v1/default/find-missing", data=MEMBERS[0] + NEW[0],
                                     headers={"Content-Type": "application/octet-stream"},
                                     verify=cert, timeout=10)
            self.assertEqual(response.content, NEW[0])
            with self.assertRaises(requests.exceptions.ConnectionError):
                requests.get("http://" + server.http + "/healthz", timeout=30).raise_for_status()
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
