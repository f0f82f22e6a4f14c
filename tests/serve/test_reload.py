"""Hot reload under load: while HTTP and gRPC clients send batches, the
catalog grows and shrinks and 20 new snapshots are published (by POST
/admin/reload and SIGHUP in turn), with 3 corrupt ones, one of an older
version and one of another catalog among them. No request may fail, every
answer must be exact at the version it was served at (X-Abf-Catalog-Version,
the gRPC trailer), versions never go backwards for a client, and each refused
snapshot is counted while the previous one keeps serving."""

import os
import random
import signal
import sys
import threading
import unittest
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests", "grpc", "grpc_tools", "google.protobuf")
import grpc  # noqa: E402
import requests  # noqa: E402

SNAPSHOTS = 20
INITIAL = support.digests("initial", 4000)
ADDED = [support.digests("added-%d" % k, 150) for k in range(SNAPSHOTS)]
NEVER = support.digests("never", 3000)
POOL = INITIAL + [d for batch in ADDED for d in batch] + NEVER
BATCH = 800
MAX_REQUESTS = 5000  # per client; the loop also ends when the reloads are done


def read(path):
    with open(path, "rb") as data:
        return data.read()


class ReloadUnderLoad(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-reload-")
        self.pb2, self.pb2_grpc = support.generate_grpc_modules(self.dir)
        self.catalog = support.Catalog(self.dir, expected_items=20000)
        self.catalog.add(INITIAL)
        self.catalog.build()
        self.other = support.Catalog(self.dir, "other", expected_items=20000)
        self.other.add(INITIAL[:10])
        self.token = "reload-test-token-0123456789"
        tokens = support.write_private(os.path.join(self.dir, "tokens"),
                                       "%s default,@admin\n" % self.token)
        self.server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                     "--token-file", tokens, "--grpc-listen", "127.0.0.1:0")
        self.headers = {"Authorization": "Bearer " + self.token}
        self.done = threading.Event()
        self.records = []  # (client, sequence, version, item indices, missing indices)
        self.failures = []
        self.answered = {}  # client: answers recorded
        self.lock = threading.Lock()

    def tearDown(self):
        self.done.set()
        status = self.server.stop()
        self.assertEqual(status, 0)

    def record(self, client, sequence, version, picks, missing):
        with self.lock:
            self.records.append((client, sequence, version, picks, missing))
            self.answered[client] = self.answered.get(client, 0) + 1

    def wait_for_a_fresh_answer(self):
        """Until some client has an answer to a request it sent after this
        call (its second answer from now: the first may have been in flight),
        or a client failed. Every snapshot published is asked, on any
        machine, instead of hoping the clients were quick enough."""
        with self.lock:
            mark = dict(self.answered)
        def fresh():
            with self.lock:
                return self.failures or any(count >= mark.get(client, 0) + 2
                                            for client, count in self.answered.items())
        support.wait_until(fresh, what="an answer from a client")

    def http_client(self, client):
        rng = random.Random(client)
        session = requests.Session()
        url = self.server.url + "/v1/default/find-missing"
        headers = dict(self.headers, **{"Content-Type": "application/octet-stream"})
        try:
            for sequence in range(MAX_REQUESTS):
                if self.done.is_set():
                    break
                picks = array("I", (rng.randrange(len(POOL)) for _ in range(BATCH)))
                response = session.post(url, data=b"".join(POOL[i] for i in picks),
                                        headers=headers, timeout=60)
                if response.status_code != 200:
                    self.failures.append("http %d: %s" % (response.status_code, response.text))
                    return
                body = response.content
                position = {}
                for i in picks:
                    position.setdefault(POOL[i], i)
                missing = array("I", (position[body[j:j + 32]] for j in range(0, len(body), 32)))
                self.record(client, sequence, int(response.headers["X-Abf-Catalog-Version"]),
                            picks, missing)
        except Exception as error:  # noqa: BLE001 - any failure fails the test
            self.failures.append("http client %d: %r" % (client, error))
        finally:
            session.close()

    def grpc_client(self, client):
        rng = random.Random(client)
        channel = grpc.insecure_channel(self.server.grpc)
        stub = self.pb2_grpc.ContentAddressableStorageStub(channel)
        metadata = [("authorization", "Bearer " + self.token)]
        try:
            for sequence in range(MAX_REQUESTS):
                if self.done.is_set():
                    break
                picks = array("I", (rng.randrange(len(POOL)) for _ in range(BATCH)))
                request = self.pb2.FindMissingBlobsRequest(instance_name="default")
                for i in picks:
                    request.blob_digests.add(hash=POOL[i].hex(), size_bytes=i)
                response, call = stub.FindMissingBlobs.with_call(request, metadata=metadata,
                                                                 timeout=60)
                version = int(dict(call.trailing_metadata())["x-abf-catalog-version"])
                missing = array("I", (d.size_bytes for d in response.missing_blob_digests))
                self.record(client, sequence, version, picks, missing)
        except Exception as error:  # noqa: BLE001
            self.failures.append("grpc client %d: %r" % (client, error))
        finally:
            channel.close()

    def reload(self, how):
        """Reloads and returns the served version (waits for SIGHUP's)."""
        if how == "admin":
            response = requests.post(self.server.url + "/admin/reload", headers=self.headers,
                                     timeout=60)
            # 500 with the reason when the snapshot was refused, 200 when not.
            report = response.json()["tenants"][0]
            self.assertEqual(response.status_code, 200 if report["ok"] else 500, response.text)
            if not report["ok"]:
                self.assertEqual(response.json()["error"]["code"], "reload_failed")
                self.assertIn(report["error"], response.json()["error"]["message"])
            return report["ok"], report["catalog_version"]
        before = self.failed_reloads()
        wanted = self.catalog.version
        self.server.signal(signal.SIGHUP)
        seen = {}

        def finished():
            served = requests.get(self.server.url + "/readyz", headers=self.headers,
                                  timeout=10).json()
            seen["version"] = served["tenants"]["default"]["catalog_version"]
            if seen["version"] == wanted:
                return True, seen["version"]
            if self.failed_reloads() > before:
                return False, seen["version"]
            return None

        return support.wait_until(finished, what=lambda: "the SIGHUP reload of version %d "
                                  "(serving %r)" % (wanted, seen.get("version")))

    def failed_reloads(self):
        text = requests.get(self.server.url + "/metrics", headers=self.headers, timeout=10).text
        return support.metric(text, "artifact_bloom_serve_reloads_total", tenant="default", result="failed")

    def put_in_place(self, data):
        temporary = self.catalog.snapshot + ".tmp"
        with open(temporary, "wb") as out:
            out.write(data)
        os.replace(temporary, self.catalog.snapshot)

    def test_reload_under_load_loses_nothing(self):
        clients = [threading.Thread(target=self.http_client, args=(i,)) for i in range(3)]
        clients.append(threading.Thread(target=self.grpc_client, args=(99,)))
        for thread in clients:
            thread.start()
        refused = 0
        published = []
        try:
            self.wait_for_a_fresh_answer()
            for k in range(SNAPSHOTS):
                self.catalog.add(ADDED[k])
                if k % 4 == 3:
                    self.catalog.remove(INITIAL[k * 40:(k + 1) * 40] + ADDED[k - 1][:20])
                built = self.catalog.build(output=self.catalog.snapshot + ".new")
                good = read(built)
                if k in (4, 9, 14):
                    # Corrupt: a flipped payload byte, a truncated file, a bad magic.
                    corrupt = {4: good[:200] + bytes([good[200] ^ 1]) + good[201:],
                               9: good[:len(good) // 2],
                               14: b"XBF1" + good[4:]}[k]
                    self.put_in_place(corrupt)
                    ok, version = self.reload("admin" if k != 9 else "sighup")
                    self.assertFalse(ok, "corrupt snapshot %d was published" % k)
                    self.assertEqual(version, published[-1] if published else 1)
                    refused += 1
                if k == 7:
                    # Older than the serving one, then one of another catalog.
                    self.catalog.build(output=self.catalog.snapshot + ".old", version=1)
                    self.put_in_place(read(self.catalog.snapshot + ".old"))
                    ok, _ = self.reload("admin")
                    self.assertFalse(ok, "an older snapshot was published")
                    self.other.build(output=self.catalog.snapshot + ".foreign")
                    self.put_in_place(read(self.catalog.snapshot + ".foreign"))
                    ok, _ = self.reload("sighup")
                    self.assertFalse(ok, "a snapshot of another catalog was published")
                    refused += 2
                self.put_in_place(good)
                ok, version = self.reload("admin" if k % 2 == 0 else "sighup")
                self.assertTrue(ok, "snapshot %d was refused" % k)
                self.assertEqual(version, self.catalog.version)
                published.append(version)
                self.wait_for_a_fresh_answer()
        finally:
            self.done.set()
            for thread in clients:
                thread.join(timeout=120)
        self.assertEqual(self.failures, [])
        self.assertFalse(any(thread.is_alive() for thread in clients))

        # Every answer exact at the version it was served at.
        truth = support.Truth(self.catalog.db)
        versions = set()
        last = {}
        for client, sequence, version, picks, missing in sorted(self.records,
                                                                key=lambda r: (r[0], r[1])):
            versions.add(version)
            self.assertGreaterEqual(version, last.get(client, 0), "a client went back in versions")
            last[client] = version
            expected = [i for i in picks if not truth.exists(POOL[i], version)]
            if list(missing) != expected:
                self.fail("client %d request %d at version %d: %d missing, expected %d" % (
                    client, sequence, version, len(missing), len(expected)))
        self.assertGreater(len(self.records), 40)
        self.assertGreaterEqual(len(versions), 5, "answers came from too few versions: %s" %
                                sorted(versions))
        # A reload is counted just after it is published (what SIGHUP's
        # wait sees on /readyz): the last one waited for, then every count.
        def metrics():
            return requests.get(self.server.url + "/metrics", headers=self.headers,
                                timeout=10).text
        support.wait_until(lambda: support.metric(metrics(), "artifact_bloom_serve_reloads_total",
                                                  tenant="default", result="ok") >= SNAPSHOTS + 1,
                           what="%d counted reloads" % (SNAPSHOTS + 1))
        text = metrics()
        self.assertEqual(support.metric(text, "artifact_bloom_serve_reloads_total", tenant="default",
                                        result="failed"), refused)
        self.assertEqual(support.metric(text, "artifact_bloom_serve_reloads_total", tenant="default",
                                        result="ok"), SNAPSHOTS + 1)
        self.assertEqual(support.metric(text, "artifact_bloom_snapshot_load_failure_total",
                                        tenant="default"), refused)
        self.assertEqual(support.metric(text, "artifact_bloom_catalog_version", tenant="default"),
                         self.catalog.version)
        sys.stderr.write("reload under load: %d answers checked, versions %d..%d (%d distinct), "
                         "%d snapshots published, %d refused\n" % (
                             len(self.records), min(versions), max(versions), len(versions),
                             len(published), refused))


if __name__ == "__main__":
    unittest.main(verbosity=2)
