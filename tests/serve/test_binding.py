"""`abf serve` serves only a snapshot that holds what its catalog holds at the
snapshot's version (issue 22, reproductions 1 and 3a), at start and at every
reload: a refused snapshot is counted and logged, the old one keeps serving,
and no request is ever answered from it (0 wrong answers)."""

import json
import os
import shutil
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

BASE = support.digests("base", 500)
X = support.digests("x", 1000)
Y = support.digests("y", 1000)
OCTETS = {"Content-Type": "application/octet-stream"}


def copy_catalog(source, target):
    """A closed catalog's files (its WAL, if one was left) copied over `target`'s."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(target + suffix):
            os.unlink(target + suffix)
        if os.path.exists(source + suffix):
            shutil.copy(source + suffix, target + suffix)


class ServeRefusesAnotherContent(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-binding-")
        self.catalog = support.Catalog(self.dir, expected_items=5000)
        self.token = "binding-test-token-0123456789"
        self.tokens = support.write_private(os.path.join(self.dir, "tokens"),
                                            "%s default,@admin\n" % self.token)
        self.headers = {"Authorization": "Bearer " + self.token}

    def restored_and_advanced(self):
        """Reproduction 1: backed up at version 1, X added (version 2), the
        snapshot of that version 2 built, the backup restored, Y added (a new
        version 2). Returns the snapshot of the old version 2."""
        self.catalog.add(BASE)
        backup = os.path.join(self.dir, "backup.db")
        copy_catalog(self.catalog.db, backup)
        self.assertEqual(self.catalog.add(X), 2)
        old = self.catalog.build(output=os.path.join(self.dir, "old-v2.abf"))
        copy_catalog(backup, self.catalog.db)
        self.assertEqual(self.catalog.add(Y), 2)
        return old

    def find_missing(self, server, items):
        return requests.post(server.url + "/v1/default/find-missing", data=b"".join(items),
                             headers=dict(self.headers, **OCTETS), timeout=30)

    def metric(self, server, name, **labels):
        text = requests.get(server.url + "/metrics", headers=self.headers, timeout=10).text
        return support.metric(text, name, **labels)

    def test_snapshot_of_a_restored_catalog_is_refused_at_start(self):
        old = self.restored_and_advanced()
        # Before: all 1,000 of Y answered missing at version 2. Then: served
        # unready (503 no_snapshot). Now (issue 37): the server does not
        # start, exit 1 before it listens, naming the rule and the file.
        server = support.Server("--snapshot", old, "--db", self.catalog.db,
                                "--token-file", self.tokens, expect_failure=True)
        self.assertEqual(server.returncode, 1)
        self.assertEqual(server.process.stdout.read(), b"")  # no ready line
        server.process.stdout.close()
        error = server.log_text()
        server.log.close()
        for fragment in ("catalog_mismatch", "old-v2.abf", "catalog version 2",
                         "abf build --from-catalog", "tenant default"):
            self.assertIn(fragment, error)
        # The catalog's own version 2, rebuilt, serves exactly.
        self.catalog.build(output=old)
        server = support.Server("--snapshot", old, "--db", self.catalog.db,
                                "--token-file", self.tokens)
        try:
            self.assertTrue(server.ready["tenants_ready"])
            response = self.find_missing(server, Y + X[:3])
            self.assertEqual(response.status_code, 200)
            self.assertEqual(response.content, b"".join(X[:3]))
            self.assertEqual(response.headers["X-Abf-Catalog-Version"], "2")
        finally:
            self.assertEqual(server.stop(), 0)

    def test_every_reload_is_checked_and_a_refused_one_keeps_the_old_snapshot(self):
        self.catalog.add(BASE)
        self.catalog.build()
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--token-file", self.tokens)
        try:
            self.assertTrue(server.ready["tenants_ready"])
            self.catalog.add(X)
            stats = support.run_abf("catalog", "stats", "--db", self.catalog.db, "--json")
            catalog_id = json.loads(stats.stdout)["catalog_id"]
            # Reproduction 3a at a reload: a file build of 10 of the catalog's
            # digests, given its id and version 2.
            few = os.path.join(self.dir, "few.txt")
            with open(few, "w") as out:
                out.write("".join(d.hex() + "\n" for d in X[:10]))
            staged = self.catalog.snapshot + ".tmp"
            support.run_abf("build", "-n", 5000, "-p", 0.01, "--catalog-version", 2,
                            "--catalog-id", catalog_id, "-i", few, "-o", staged)
            os.rename(staged, self.catalog.snapshot)
            for how in ("admin", "sighup"):
                failed_before = self.metric(server, "artifact_bloom_serve_reloads_total", tenant="default",
                                            result="failed")
                if how == "admin":
                    response = requests.post(server.url + "/admin/reload", headers=self.headers,
                                             timeout=60)
                    self.assertEqual(response.status_code, 500, response.text)
                    report = response.json()["tenants"][0]
                    self.assertFalse(report["ok"])
                    self.assertIn("catalog_mismatch", report["error"])
                    self.assertEqual(report["catalog_version"], 1)
                else:
                    server.signal(signal.SIGHUP)
                    support.wait_until(
                        lambda: self.metric(server, "artifact_bloom_serve_reloads_total",
                                            tenant="default", result="failed") != failed_before,
                        what="the SIGHUP reload to be refused")
                self.assertEqual(self.metric(server, "artifact_bloom_serve_reloads_total", tenant="default",
                                             result="failed"), failed_before + 1)
                # The version-1 snapshot keeps serving, and answers exactly at
                # the catalog's head: X was added at 2, so nothing is missing.
                ready = requests.get(server.url + "/readyz", headers=self.headers,
                                     timeout=10).json()
                self.assertEqual(ready["tenants"]["default"]["catalog_version"], 1)
                response = self.find_missing(server, BASE[:5] + X[:20] + Y[:3])
                self.assertEqual(response.status_code, 200)
                self.assertEqual(response.content, b"".join(Y[:3]))
                self.assertEqual(response.headers["X-Abf-Catalog-Version"], "2")
            self.assertEqual(self.metric(server, "artifact_bloom_snapshot_load_failure_total",
                                         tenant="default"), 2)
            # The catalog's own version 2 is published.
            self.catalog.build()
            response = requests.post(server.url + "/admin/reload", headers=self.headers,
                                     timeout=60)
            self.assertTrue(response.json()["tenants"][0]["ok"], response.text)
            ready = requests.get(server.url + "/readyz", headers=self.headers, timeout=10).json()
            self.assertEqual(ready["tenants"]["default"]["catalog_version"], 2)
            response = self.find_missing(server, BASE[:5] + X[:20] + Y[:3])
            self.assertEqual(response.content, b"".join(Y[:3]))
            self.assertEqual(response.headers["X-Abf-Catalog-Version"], "2")
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
