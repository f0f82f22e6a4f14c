"""`abf serve --index`: the filter's maybes are answered from an exact index
(ABFX, `abf index`, or an ABXS index set, `abf index --shards`) instead of SQLite, with the same answers. The index is
checked against its catalog (check_index_binding) at start, where a mismatch
stops the server with exit status 1, and at every reload, where a mismatch
answers 500 and the old index keeps serving. Answers stay exact at the
catalog's head when the catalog moved on after the index's version. Every
answer is compared with the catalog's SQLite file and with a server
without the index."""

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

FIRST = support.digests("first", 3000)    # version 1
SECOND = support.digests("second", 1000)  # version 2
NEVER = support.digests("never", 3000)
OCTETS = {"Content-Type": "application/octet-stream"}


def find_missing(session, url, items):
    response = session.post(url + "/v1/default/find-missing", data=b"".join(items),
                            headers=OCTETS, timeout=60)
    if response.status_code != 200:
        raise AssertionError("find-missing: %d %s" % (response.status_code, response.text))
    body = response.content
    return ([body[i:i + 32] for i in range(0, len(body), 32)],
            int(response.headers["X-Abf-Catalog-Version"]))


def build_index(catalog, output, version=None, shards=None):
    args = ["index", "--db", catalog.db, "-o", output]
    if version is not None:
        args += ["--version", version]
    if shards is not None:
        args += ["--shards", shards]
    support.run_abf(*args)
    return output


def readyz(session, server):
    return session.get(server.url + "/readyz", timeout=10).json()["tenants"]["default"]


class ServeWithIndex(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-index-")
        # A filter with many false positives, so that the index answers many
        # maybes (an fpp of 0.3 leaves ~900 of the 3,000 absent digests maybe).
        self.catalog = support.Catalog(self.dir, expected_items=4000, fpp=0.3)
        self.index = os.path.join(self.dir, "catalog.abfx")
        self.session = requests.Session()
        self.servers = []

    def tearDown(self):
        self.session.close()
        for server in self.servers:
            if server.process.poll() is None:
                server.stop()

    def serve(self, *extra):
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 2, *extra)
        self.servers.append(server)
        return server

    def serve_config(self, index):
        """A server from a config file whose metrics are released at every
        scrape a second after the last (the fastest the config allows)."""
        config = os.path.join(self.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"listen": "127.0.0.1:0", "limits": {"idle_timeout_seconds": 2},
                       "metrics_release": {"interval_seconds": 1, "min_missing_digests": 1},
                       "tenants": [{"name": "default", "snapshot": self.catalog.snapshot,
                                    "db": self.catalog.db, "index": index}]}, out)
        server = support.Server("--config", config, listen=False)
        self.servers.append(server)
        return server

    def released_metrics(self, server):
        """/metrics after a release: the counters it shows follow the
        answers already given (counted before each answer is sent); more
        than the release interval passes (sleep never returns early), so
        this scrape releases them."""
        time.sleep(1.2)
        return self.session.get(server.url + "/metrics", timeout=10).text

    def query(self, seed):
        """~50% present: every version's digests, ones removed, never added,
        and the lowest and highest digest the catalog holds (the index's
        first and last)."""
        rng = random.Random(seed)
        truth = support.Truth(self.catalog.db)
        present = sorted(d for d in truth.rows if truth.exists(d, self.catalog.version))
        items = rng.sample(present, min(len(present), 2000)) + rng.sample(NEVER, 2000)
        items += [present[0], present[-1], NEVER[0]]
        rng.shuffle(items)
        return items

    def assert_same_answers(self, plain, indexed, items):
        truth = support.Truth(self.catalog.db)
        with_index, version = find_missing(self.session, indexed.url, items)
        without, version_plain = find_missing(self.session, plain.url, items)
        self.assertEqual(version, self.catalog.version)
        self.assertEqual(version_plain, version)
        expected = truth.missing(items, version)
        self.assertEqual(with_index, expected)
        self.assertEqual(without, expected)
        # Not a vacuous comparison: about half are present, half missing.
        self.assertGreater(len(expected), len(items) // 4)
        self.assertLess(len(expected), 3 * len(items) // 4)
        # A blob lookup of the first and last digest, and of one missing.
        for digest, status in ((min(items), None), (max(items), None), (NEVER[1], 404)):
            response = self.session.get(indexed.url + "/v1/default/blobs/sha256:" + digest.hex(),
                                        timeout=10)
            want = status or (200 if truth.exists(digest, version) else 404)
            self.assertEqual(response.status_code, want, digest.hex())

    def test_answers_equal_sqlite_at_the_index_version(self):
        self.catalog.add(FIRST)
        self.catalog.remove(FIRST[:200])  # version 2: removals the index must not hold
        self.catalog.build()
        build_index(self.catalog, self.index)
        indexed = self.serve_config(self.index)
        plain = self.serve()
        self.assertTrue(indexed.ready["tenants_ready"])
        self.assertEqual(readyz(self.session, indexed)["index"],
                         {"catalog_version": 2, "digests": 2800})
        self.assertNotIn("index", readyz(self.session, plain))
        text = self.session.get(indexed.url + "/metrics", timeout=10).text
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_version",
                                        tenant="default"), 2)
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_digests",
                                        tenant="default"), 2800)
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_reloads_total",
                                        tenant="default", result="ok"), 1)
        items = self.query(1) + FIRST[:200]  # removed at version 2: missing
        self.assert_same_answers(plain, indexed, items)
        # Every exact lookup was answered by the index alone (at its version).
        text = self.released_metrics(indexed)
        exact = support.metric(text, "artifact_bloom_exact_lookup_total", tenant="default")
        self.assertGreater(exact, 500)  # the fpp-0.3 filter's maybes, and the blob lookups
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_lookups_total",
                                        tenant="default"), exact)
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_store_lookups_total",
                                        tenant="default"), 0)
        promtool = shutil.which("promtool")
        if promtool is not None:  # test_ops.py says SKIP when it is missing
            result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                    capture_output=True, timeout=60)
            self.assertEqual(result.returncode, 0, (result.stdout + result.stderr).decode())
        published = [line for line in indexed.log_lines()
                     if line.get("event") == "index_published"]
        self.assertEqual(len(published), 1, indexed.log_text())
        self.assertEqual(published[0]["catalog_version"], 2)

    def test_an_index_set_answers_as_the_single_index(self):
        """An index set (abf index --shards 5, ABXS) in the config's index
        key: the same answers, by the set alone at its version."""
        self.catalog.add(FIRST)
        self.catalog.remove(FIRST[:200])
        self.catalog.build()
        index_set = build_index(self.catalog, os.path.join(self.dir, "catalog.abxs"), shards=5)
        indexed = self.serve_config(index_set)
        plain = self.serve()
        self.assertTrue(indexed.ready["tenants_ready"])
        self.assertEqual(readyz(self.session, indexed)["index"],
                         {"catalog_version": 2, "digests": 2800})
        self.assert_same_answers(plain, indexed, self.query(7) + FIRST[:200])
        text = self.released_metrics(indexed)
        exact = support.metric(text, "artifact_bloom_exact_lookup_total", tenant="default")
        self.assertGreater(exact, 500)
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_store_lookups_total",
                                        tenant="default"), 0)

    def test_answers_at_the_head_after_the_index_version(self):
        """Index and snapshot of version 1; the catalog adds (version 2) and
        removes (version 3) while serving: answers are exact at 3."""
        self.catalog.add(FIRST)
        self.catalog.build()
        build_index(self.catalog, self.index)
        indexed = self.serve_config(self.index)
        plain = self.serve()
        self.assertEqual(self.catalog.add(SECOND), 2)
        items = self.query(2) + SECOND[:300]
        missing, version = find_missing(self.session, indexed.url, items)
        self.assertEqual(version, 2)
        self.assertFalse(set(missing) & set(SECOND))  # added after the index: present
        self.assert_same_answers(plain, indexed, items)
        # The digests added after the index's version were asked of the catalog.
        text = self.released_metrics(indexed)
        passed_on = support.metric(text, "artifact_bloom_serve_index_store_lookups_total",
                                   tenant="default")
        self.assertGreaterEqual(passed_on, 300)
        self.assertGreater(support.metric(text, "artifact_bloom_serve_index_lookups_total",
                                          tenant="default"), 500)
        self.assertEqual(self.catalog.remove(FIRST[:100] + SECOND[:100]), 3)
        self.assert_same_answers(plain, indexed, items + FIRST[:100])
        # The index still serves (version 1) at the head.
        self.assertEqual(readyz(self.session, indexed)["index"]["catalog_version"], 1)

    def test_a_catalog_rewritten_under_the_index(self):
        """A backup restored and advanced again under the server: the index
        of version 1 holds the old history's digests, and the added digests
        its store held are the old history's too. No digest of the new
        history may be answered missing."""
        import sqlite3
        self.catalog.add(FIRST)
        backup = os.path.join(self.dir, "backup.db")

        def copy(source_path, target_path):
            source, target = sqlite3.connect(source_path), sqlite3.connect(target_path)
            try:
                source.backup(target)
            finally:
                source.close()
                target.close()

        copy(self.catalog.db, backup)  # version 1
        self.catalog.build()
        build_index(self.catalog, self.index)
        indexed = self.serve("--index", self.index)
        x, y = SECOND[:300], SECOND[300:600]
        self.catalog.add(x)  # version 2 = FIRST + X
        missing, version = find_missing(self.session, indexed.url, x + NEVER[:10])
        self.assertEqual((set(missing), version), (set(NEVER[:10]), 2))
        copy(backup, self.catalog.db)  # back to version 1 ...
        self.assertEqual(self.catalog.add(y), 2)  # ... and another version 2
        items = y + x + FIRST[:200] + NEVER[:10]
        missing, version = find_missing(self.session, indexed.url, items)
        self.assertEqual(missing, support.Truth(self.catalog.db).missing(items, version))
        self.assertFalse(set(missing) & set(y))
        # Rewritten below the index's version: no answer at all (503), unready.
        copy(backup, self.catalog.db)
        db = sqlite3.connect(self.catalog.db)
        with db:
            # Version 1 now holds one digest fewer (a hand edit standing for
            # a backup of another history): the index's own version changed.
            db.execute("DELETE FROM artifacts WHERE digest = ?", (FIRST[0],))
            db.execute("UPDATE versions SET item_count = item_count - 1 WHERE version = 1")
        db.close()
        response = self.session.post(indexed.url + "/v1/default/find-missing",
                                     data=b"".join(FIRST[:10]), headers=OCTETS, timeout=60)
        self.assertEqual(response.status_code, 503, response.text)
        self.assertEqual(self.session.get(indexed.url + "/readyz", timeout=10).status_code, 503)

    def test_an_empty_index_answers_through_the_head(self):
        """The index of version 0 (no digest), the snapshot of version 1."""
        build_index(self.catalog, self.index, version=0)
        self.catalog.add(FIRST)
        self.catalog.build()
        indexed = self.serve("--index", self.index)
        plain = self.serve()
        self.assertEqual(readyz(self.session, indexed)["index"],
                         {"catalog_version": 0, "digests": 0})
        self.assert_same_answers(plain, indexed, self.query(3))

    def test_a_mismatched_index_stops_the_server_at_start(self):
        self.catalog.add(FIRST)
        self.catalog.build()
        other = support.Catalog(self.dir, name="other", expected_items=4000)
        other.add(FIRST)  # the same digests, another catalog
        build_index(other, self.index)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--index", self.index, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        log = server.log_text()
        server.stop()
        for fragment in ("catalog_mismatch", "catalog.abfx", "tenant default"):
            self.assertIn(fragment, log)
        # A file that is no index at all is refused the same way.
        with open(self.index, "wb") as out:
            out.write(b"not an index" * 20)
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--index", self.index, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        server.stop()
        # --index beside --config is a usage error.
        config = os.path.join(self.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"tenants": [{"name": "default", "snapshot": self.catalog.snapshot,
                                    "db": self.catalog.db, "index": self.index}]}, out)
        result = support.run_abf("serve", "--config", config, "--index", self.index, check=False)
        self.assertEqual(result.returncode, 2, result.stderr)

    def test_every_reload_rereads_and_checks_the_index(self):
        self.catalog.add(FIRST)
        self.catalog.build()
        build_index(self.catalog, self.index)
        # From the config file's "index" key (a path relative to the file).
        config = os.path.join(self.dir, "serve.json")
        with open(config, "w") as out:
            json.dump({"listen": "127.0.0.1:0",
                       "tenants": [{"name": "default", "snapshot": "catalog.abf",
                                    "db": "catalog.db", "index": "catalog.abfx"}]}, out)
        indexed = support.Server("--config", config, listen=False)
        self.servers.append(indexed)
        plain = self.serve()
        self.assertEqual(readyz(self.session, indexed)["index"]["catalog_version"], 1)
        # Another catalog's index renamed into place: refused at the reload.
        other = support.Catalog(self.dir, name="other", expected_items=4000)
        other.add(FIRST)
        build_index(other, self.index + ".tmp")
        os.rename(self.index + ".tmp", self.index)
        response = self.session.post(indexed.url + "/admin/reload", timeout=60)
        self.assertEqual(response.status_code, 500, response.text)
        report = response.json()["tenants"][0]
        self.assertFalse(report["ok"])
        self.assertIn("index", report["error"])
        self.assertIn("catalog_mismatch", report["error"])
        self.assertEqual(readyz(self.session, indexed)["index"]["catalog_version"], 1)
        text = self.session.get(indexed.url + "/metrics", timeout=10).text
        self.assertEqual(support.metric(text, "artifact_bloom_serve_index_reloads_total",
                                        tenant="default", result="failed"), 1)
        self.assertEqual(len([line for line in indexed.log_lines()
                              if line.get("event") == "index_refused"]), 1)
        # The old index keeps answering, exactly, at the new head.
        self.catalog.add(SECOND)
        self.assert_same_answers(plain, indexed, self.query(4) + SECOND[:50])
        # The catalog's own index of version 2: published.
        build_index(self.catalog, self.index + ".tmp")
        os.rename(self.index + ".tmp", self.index)
        response = self.session.post(indexed.url + "/admin/reload", timeout=60)
        self.assertEqual(response.status_code, 200, response.text)
        self.assertEqual(readyz(self.session, indexed)["index"],
                         {"catalog_version": 2, "digests": 4000})
        self.assert_same_answers(plain, indexed, self.query(5))

    def test_answers_stay_exact_while_the_index_is_reloaded(self):
        """Three clients query while the index file is replaced (by rename)
        and reloaded, alternating between the index of version 1 and of
        version 2: every answer equals SQLite's at the version it carries.
        Six reloads, each once a client has been answered by the index the
        last one published (a request sent after it)."""
        self.catalog.add(FIRST)
        self.catalog.build()
        v1 = build_index(self.catalog, os.path.join(self.dir, "v1.abfx"))
        self.catalog.add(SECOND)
        v2 = build_index(self.catalog, os.path.join(self.dir, "v2.abfx"))
        shutil.copy(v1, self.index)
        indexed = self.serve("--index", self.index)
        truth = support.Truth(self.catalog.db)
        items = self.query(6) + SECOND[:200]
        expected = truth.missing(items, 2)
        done = threading.Event()
        lock = threading.Lock()
        failures, answered = [], [0]
        clients = 3

        def client():
            session = requests.Session()
            try:
                while not done.is_set():
                    missing, version = find_missing(session, indexed.url, items)
                    if version != 2 or missing != expected:
                        failures.append((version, len(missing), len(expected)))
                    with lock:
                        answered[0] += 1
            except Exception as error:  # noqa: BLE001
                failures.append(repr(error))
            finally:
                session.close()

        def answers():
            with lock:
                return answered[0]

        def wait_for_a_fresh_answer():
            # At most one request per client was in flight before.
            mark = answers()
            support.wait_until(lambda: failures or answers() > mark + clients,
                               what="an answer after the reload")

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        reloads = 0
        try:
            wait_for_a_fresh_answer()
            while reloads < 6 and not failures:
                source = v2 if reloads % 2 == 0 else v1
                shutil.copy(source, self.index + ".tmp")
                os.rename(self.index + ".tmp", self.index)
                response = self.session.post(indexed.url + "/admin/reload", timeout=60)
                self.assertEqual(response.status_code, 200, response.text)
                reloads += 1
                wait_for_a_fresh_answer()
        finally:
            done.set()
            for thread in threads:
                thread.join(timeout=60)
        self.assertEqual(failures, [])
        self.assertEqual(reloads, 6)
        self.assertGreater(answered[0], reloads)
        published = [line for line in indexed.log_lines() if line.get("event") == "index_published"]
        self.assertEqual(len(published), 1 + reloads)


if __name__ == "__main__":
    unittest.main(verbosity=2)
