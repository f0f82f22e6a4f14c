"""`abf serve`'s operations against hostile and careless clients (issue 23):
private /metrics and /readyz, the metrics release that keeps raw filter
answers out of /metrics (the 200-probe attack), metrics that pass
`promtool check metrics`, and gRPC's access lines and empty instance_name."""

import json
import os
import random
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

MEMBERS = support.digests("member", 2000)
TOKENS = {"a": "ops-token-tenant-a-0123456789", "metrics": "ops-token-metrics-0123456789",
          "admin": "ops-token-admin-0123456789ab", "all": "ops-token-every-tenant-012345"}


def bearer(token):
    return {"Authorization": "Bearer " + token}


def raw_filter_answers(catalog, items, key_file):
    """The raw keyed-filter answer of each digest ("maybe" or "absent"), from
    `abf query` on the served snapshot: what the attack tries to learn."""
    path = os.path.join(catalog.directory, "probe.txt")
    with open(path, "w") as out:
        out.write("".join(d.hex() + "\n" for d in items))
    result = support.run_abf("query", "-s", catalog.snapshot, "-i", path, "--key-file", key_file)
    answers = {}
    for line in result.stdout.decode().splitlines():
        digest_hex, _, answer = line.partition("\t")
        answers[bytes.fromhex(digest_hex)] = answer
    return [answers[d] for d in items]


class Server:
    """One tenant "a" (keyed; fpp 0.3 for 5000 digests holding 2000: about
    6% of other digests are false positives),
    and a token file with a tenant token, an @metrics token and an @admin
    token; `release` is the config's metrics_release."""

    def __init__(self, directory, release=None, extra_tenants=0, grpc=False):
        self.key = os.path.join(directory, "a.key")
        if not os.path.exists(self.key):
            support.run_abf("key", "generate", "-o", self.key)
        self.catalog = support.Catalog(directory, "a", expected_items=5000, fpp=0.3,
                                       key_file=self.key)
        self.catalog.add(MEMBERS)
        self.catalog.build()
        tenants = [{"name": "a", "snapshot": "a.abf", "db": "a.db", "key_file": "a.key"}]
        for i in range(extra_tenants):
            extra = support.Catalog(directory, "x%d" % i)
            extra.add(MEMBERS[:10])
            extra.build()
            tenants.append({"name": "x%d" % i, "snapshot": "x%d.abf" % i, "db": "x%d.db" % i})
        support.write_private(os.path.join(directory, "tokens"), (
            "%(a)s a\n%(metrics)s @metrics\n%(admin)s @admin\n%(all)s *\n") % TOKENS)
        config = {"token_file": "tokens", "tenants": tenants}
        if release:
            config["metrics_release"] = release
        path = os.path.join(directory, "serve.json")
        with open(path, "w") as out:
            json.dump(config, out)
        args = ["--config", path] + (["--grpc-listen", "127.0.0.1:0"] if grpc else [])
        self.server = support.Server(*args)
        self.url = self.server.url
        self.session = requests.Session()

    def metrics(self, token="metrics"):
        response = self.session.get(self.url + "/metrics", headers=bearer(TOKENS[token]),
                                    timeout=10)
        assert response.status_code == 200, response.text
        return response.text

    def head(self, d, token="a"):
        return self.session.head(self.url + "/v1/a/blobs/sha256:" + d.hex(),
                                 headers=bearer(TOKENS[token]), timeout=10).status_code

    def stop(self):
        self.session.close()
        return self.server.stop()


class PrivateOperations(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-ops-")
        cls.ops = Server(cls.dir)

    @classmethod
    def tearDownClass(cls):
        status = cls.ops.stop()
        assert status == 0, "abf serve exited %d" % status

    def get(self, path, token=None):
        headers = bearer(TOKENS[token]) if token else {}
        return self.ops.session.get(self.ops.url + path, headers=headers, timeout=10)

    def test_metrics_need_an_operations_token(self):
        response = self.get("/metrics")
        self.assertEqual(response.status_code, 401, response.text)
        self.assertNotIn("artifact_bloom", response.text)
        response = self.get("/metrics", "a")
        self.assertEqual(response.status_code, 403, response.text)
        self.assertEqual(response.json()["error"]["code"], "forbidden")
        self.assertNotIn('tenant="a"', response.text)
        for token in ("metrics", "admin"):
            response = self.get("/metrics", token)
            self.assertEqual(response.status_code, 200, response.text)
            self.assertIn('artifact_bloom_serve_snapshot_ready{tenant="a"} 1', response.text)

    def test_readyz_says_only_ready_without_an_operations_token(self):
        for token in (None, "a", "all"):
            response = self.get("/readyz", token)
            self.assertEqual(response.status_code, 200)
            self.assertEqual(response.json(), {"ready": True}, token)
        self.assertEqual(self.get("/readyz", "metrics").json(),
                         {"ready": True, "tenants": {"a": {
                             "ready": True, "catalog_version": 1,
                             "lag": {"head_version": 1, "versions": 0, "digests_added": 0}}}})
        self.assertIn("tenants", self.get("/readyz", "admin").json())
        self.assertEqual(self.get("/healthz").status_code, 200)

    def test_admin_needs_the_admin_scope(self):
        url = self.ops.url + "/admin/reload"
        self.assertEqual(self.ops.session.post(url, timeout=30).status_code, 401)
        for token in ("a", "metrics", "all"):
            response = self.ops.session.post(url, headers=bearer(TOKENS[token]), timeout=30)
            self.assertEqual(response.status_code, 403, token)
        response = self.ops.session.post(url, headers=bearer(TOKENS["admin"]), timeout=30)
        self.assertEqual(response.status_code, 200, response.text)


class MetricsAttack(unittest.TestCase):
    """The attack of issue 23: read artifact_bloom_false_positive_total
    before and after each HEAD of a missing digest; a step of one says the
    keyed filter answered maybe. On 200 probes, half of them false
    positives, it recovered 200 of 200 answers before the release rule."""

    PROBES = 200

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-attack-")

    def probes(self, server):
        """100 missing digests the keyed filter answers maybe, 100 it answers
        absent, shuffled (guessing blindly gets half right); and 100 more
        missing digests with the number of them answered maybe."""
        candidates = support.digests("probe", 5000)
        answers = raw_filter_answers(server.catalog, candidates, server.key)
        maybes = [d for d, a in zip(candidates, answers) if a == "maybe"]
        absents = [d for d, a in zip(candidates, answers) if a == "absent"]
        half = self.PROBES // 2
        self.assertGreaterEqual(len(maybes), half)
        self.assertGreaterEqual(len(absents), half + 100)
        probes = [(d, True) for d in maybes[:half]] + [(d, False) for d in absents[:half]]
        random.Random(23).shuffle(probes)
        rest = maybes[half:] + absents[half:]
        extra = rest[:50] + rest[-50:]
        return probes, extra, sum(1 for d in extra if d in set(maybes))

    def attack(self, server, probes):
        """The number of raw answers the attacker gets right by reading the
        counter around each probe (a step: maybe; none: absent)."""
        right = 0
        before = support.metric(server.metrics(), "artifact_bloom_false_positive_total",
                                tenant="a")
        for d, maybe in probes:
            self.assertEqual(server.head(d), 404)
            after = support.metric(server.metrics(), "artifact_bloom_false_positive_total",
                                   tenant="a")
            guess = after - before >= 1
            right += guess == maybe
            before = after
        return right

    def test_the_200_probe_attack_recovers_nothing(self):
        # The fastest release the config allows in this test: every second,
        # once 100 digests were answered missing; the default is 60 s and 1000.
        server = Server(self.dir, release={"interval_seconds": 1, "min_missing_digests": 100})
        try:
            probes, extra, extra_maybes = self.probes(server)
            right = self.attack(server, probes)
            sys.stderr.write("metrics attack: %d of %d raw answers right (chance: %d)\n" % (
                right, self.PROBES, self.PROBES // 2))
            # Chance is 100 of 200 (guess "absent" every time); each release
            # during the run (at most two: each needs 100 missing digests)
            # makes one more guess "maybe", right or wrong.
            self.assertLessEqual(right, self.PROBES // 2 + 2)
            # The counters still reach /metrics, as totals: 100 more missing
            # digests and a second later, one release holds every answer.
            response = server.session.post(
                server.url + "/v1/a/find-missing", data=b"".join(extra),
                headers=dict(bearer(TOKENS["a"]), **{"Content-Type": "application/octet-stream"}),
                timeout=10)
            self.assertEqual(len(response.content), 32 * len(extra))
            time.sleep(1.2)
            text = server.metrics()
            self.assertEqual(support.metric(text, "artifact_bloom_false_positive_total",
                                            tenant="a"), self.PROBES // 2 + extra_maybes)
            self.assertEqual(support.metric(text, "artifact_bloom_negative_total", tenant="a"),
                             self.PROBES // 2 + len(extra) - extra_maybes)
            self.assertEqual(support.metric(text, "artifact_bloom_query_total", tenant="a"),
                             self.PROBES + len(extra))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_release_needs_enough_missing_digests(self):
        server = Server(self.dir, release={"interval_seconds": 1, "min_missing_digests": 500})
        try:
            probes, _, _ = self.probes(server)
            connection = support.Connection(server.server, bearer(TOKENS["a"]))
            try:
                for d, _ in probes:
                    status, _, _ = connection.request("HEAD", "/v1/a/blobs/sha256:" + d.hex())
                    self.assertEqual(status, 404)
                connection.sync()  # the 200 HEADs are counted
            finally:
                connection.close()
            # More than the release interval passes (sleep never returns
            # early), so the next scrape is one that may release: 200 missing
            # digests, fewer than 500, release nothing, however long one
            # waits; the exact counts stay live.
            time.sleep(1.2)
            text = server.metrics()
            self.assertEqual(support.metric(text, "artifact_bloom_false_positive_total",
                                            tenant="a"), 0)
            self.assertEqual(support.metric(text, "artifact_bloom_serve_missing_digests_total",
                                            tenant="a"), self.PROBES)
        finally:
            self.assertEqual(server.stop(), 0)


class Promtool(unittest.TestCase):
    def test_live_metrics_pass_promtool(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            sys.stderr.write("SKIP: promtool is missing (Debian prometheus, which scripts/setup "
                             "installs)\n")
            raise unittest.SkipTest("promtool is missing")
        directory = support.temp_dir(self, "abf-serve-promtool-")
        server = Server(directory, release={"interval_seconds": 1, "min_missing_digests": 1},
                        grpc=True)
        try:
            # On one connection, so that sync() knows every request's
            # latency observed and counted (that happens after its answer).
            connection = support.Connection(server.server, bearer(TOKENS["a"]))
            try:
                for d in MEMBERS[:5] + support.digests("lint", 5):
                    connection.request("HEAD", "/v1/a/blobs/sha256:" + d.hex())
                status, _, _ = connection.request(
                    "POST", "/v1/a/find-missing", b"".join(MEMBERS[:10]),
                    {"Content-Type": "application/octet-stream"})
                self.assertEqual(status, 200)
                status, _, _ = connection.request("GET", "/v1/a/nothing-here")
                self.assertEqual(status, 404)
                connection.sync()
            finally:
                connection.close()
            # The histograms reach /metrics at a release: more than its
            # interval (1 s) after the last one, the next scrape releases.
            time.sleep(1.1)
            text = server.metrics()
            result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                    capture_output=True, timeout=60)
            self.assertEqual(result.returncode, 0,
                             (result.stdout + result.stderr).decode() + "\n" + text)
            names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
            for name in names:
                self.assertTrue(name.startswith("artifact_bloom_") or name.startswith("process_"),
                                name)
            for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                         "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                         "process_start_time_seconds"):
                self.assertIn(name, names)
            self.assertGreater(support.metric(text, "process_resident_memory_bytes"), 1 << 20)
            start = support.metric(text, "process_start_time_seconds")
            self.assertLess(abs(start - time.time()), 600)
            histogram = "artifact_bloom_serve_request_duration_seconds"
            self.assertIn(histogram, names)
            self.assertEqual(support.metric(text, histogram + "_count", front="http",
                                            endpoint="blob"), 10)
            self.assertEqual(support.metric(text, histogram + "_count", front="http",
                                            endpoint="find-missing"), 1)
            self.assertEqual(support.metric(text, histogram + "_bucket", front="grpc",
                                            endpoint="FindMissingBlobs", le="+Inf"), 0)
        finally:
            self.assertEqual(server.stop(), 0)


class Grpc(unittest.TestCase):
    """FindMissingBlobs' access lines carry answer_us; an empty instance_name
    answers a one-tenant token the same whatever the server's tenants."""

    def setUp(self):
        support.require("grpc", "grpc_tools", "google.protobuf")
        self.dir = support.temp_dir(self, "abf-serve-ops-grpc-")
        self.pb2, self.pb2_grpc = support.generate_grpc_modules(self.dir)

    def outcomes(self, extra_tenants):
        import grpc
        directory = os.path.join(self.dir, "t%d" % extra_tenants)
        os.mkdir(directory)
        server = Server(directory, extra_tenants=extra_tenants, grpc=True)
        outcomes = {}
        try:
            with grpc.insecure_channel(server.server.grpc) as channel:
                stub = self.pb2_grpc.ContentAddressableStorageStub(channel)
                for token in ("a", "all", "metrics"):
                    request = self.pb2.FindMissingBlobsRequest(instance_name="")
                    request.blob_digests.add(hash=MEMBERS[0].hex(), size_bytes=1)
                    request.blob_digests.add(hash=support.digest("no").hex(), size_bytes=2)
                    try:
                        response = stub.FindMissingBlobs(
                            request, metadata=[("authorization", "Bearer " + TOKENS[token])],
                            timeout=30)
                        outcomes[token] = ("OK", len(response.missing_blob_digests))
                    except grpc.RpcError as error:
                        outcomes[token] = (error.code().name, error.details())
            lines = [line for line in server.server.log_lines()
                     if line.get("front") == "grpc" and line.get("status") == 200]
        finally:
            self.assertEqual(server.stop(), 0)
        return outcomes, lines

    def test_empty_instance_name_and_answer_us(self):
        one, lines = self.outcomes(0)
        three, _ = self.outcomes(2)
        # The one-tenant token is answered for its tenant, with one or three
        # tenants on the server; a token of no tenant is refused the same way.
        self.assertEqual(one["a"], ("OK", 1))
        self.assertEqual(three["a"], one["a"])
        self.assertEqual(three["metrics"], one["metrics"])
        self.assertEqual(one["metrics"][0], "INVALID_ARGUMENT")
        for outcome in (one, three):
            self.assertNotIn("tenants", outcome["metrics"][1])
        # Every tenant is visible to "*": an empty name asks the only one, or
        # is refused without a count.
        self.assertEqual(one["all"], ("OK", 1))
        self.assertEqual(three["all"][0], "INVALID_ARGUMENT")
        self.assertNotIn("3", three["all"][1])
        self.assertTrue(lines)
        for line in lines:
            self.assertIn("answer_us", line)
            self.assertLessEqual(line["answer_us"], line["us"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
