"""A catalog whose history is rewritten under `abf serve` (issue 33, item 1):
one written before content records (schema 2) gives the server nothing to
notice a rewrite by, so the server answers nothing at its head (503
`catalog_upgrade_needed`, unready) until the catalog is upgraded, and then
checks its snapshot and index against the recorded contents as on any
schema-3 catalog. The attacker's reproduction: a schema-2 backup restored
under a running server and advanced to the same version with other
digests, with and without `--index`, and with the head advanced past the
last version the server saw. Before the fix every stored digest of the new
history was answered missing (and, with --index, absent digests present),
with `/readyz` ready and lag 0. Every 200 answered here is compared with
the catalog's SQLite file; anything else must be a 503.

Also: the 503 of a rewrite that only the index's version saw names the
index, not the snapshot."""

import os
import sqlite3
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

FIRST = support.digests("first", 2000)  # version 1, in the backup
X = support.digests("x", 300)           # version 2 of the old history
Y = support.digests("y", 300)           # version 2 of the new one
Z = support.digests("z", 100)           # version 3 of the new one
NEVER = support.digests("never", 300)
OCTETS = {"Content-Type": "application/octet-stream"}


def copy_catalog(source_path, target_path):
    """What `sqlite3 target ".restore source"` does: the pages written into
    the live file (its inode kept)."""
    source, target = sqlite3.connect(source_path), sqlite3.connect(target_path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


def downgrade_to_schema_two(path):
    """The catalog as an abf before content records wrote it (the way
    tests/catalog_binding_cli_test.cc makes one)."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.executescript("PRAGMA journal_mode = DELETE; BEGIN;"
                         "ALTER TABLE versions DROP COLUMN fingerprint;"
                         "ALTER TABLE versions DROP COLUMN item_count;"
                         "UPDATE abf_schema SET version = 2; PRAGMA user_version = 2; COMMIT;")
    finally:
        db.close()


def schema_of(path):
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return db.execute("SELECT version FROM abf_schema").fetchone()[0]
    finally:
        db.close()


def add_as_schema_two(path, items):
    """A version added the way a schema-2 writer (an older abf) added it:
    the catalog stays at schema 2."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        version = db.execute("SELECT MAX(version) FROM versions").fetchone()[0] + 1
        db.executemany("INSERT INTO artifacts (digest, added_version) VALUES (?, ?)",
                       [(d, version) for d in items])
        db.execute("INSERT INTO versions (version, operation, created_unix, added, removed) "
                   "VALUES (?, 'add', strftime('%s', 'now'), ?, 0)", (version, len(items)))
        db.execute("COMMIT")
        return version
    finally:
        db.close()


class SchemaTwoCatalogRewritten(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-rewrite2-")
        self.catalog = support.Catalog(self.dir, expected_items=20000)
        self.catalog.add(FIRST)  # version 1
        self.backup = os.path.join(self.dir, "backup.db")
        copy_catalog(self.catalog.db, self.backup)
        self.catalog.add(X)  # version 2 = FIRST + X
        self.catalog.build()  # the snapshot of that version 2
        self.index = os.path.join(self.dir, "catalog.abfx")
        support.run_abf("index", "--db", self.catalog.db, "-o", self.index)
        downgrade_to_schema_two(self.catalog.db)
        downgrade_to_schema_two(self.backup)
        self.session = requests.Session()
        self.servers = []

    def tearDown(self):
        self.session.close()
        for server in self.servers:
            server.stop()

    def serve(self, *extra):
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 2, *extra)
        self.servers.append(server)
        return server

    def ask(self, server, items):
        """find-missing: (status, error code or None). A 200 must be the
        catalog's exact answer at the version it carries; anything else
        must be a 503."""
        response = self.session.post(server.url + "/v1/default/find-missing",
                                     data=b"".join(items), headers=OCTETS, timeout=60)
        if response.status_code == 200:
            body = response.content
            missing = [body[i:i + 32] for i in range(0, len(body), 32)]
            version = int(response.headers["X-Abf-Catalog-Version"])
            truth = support.Truth(self.catalog.db).missing(items, version)
            wrong_missing = len(set(missing) - set(truth))
            wrong_present = len(set(truth) - set(missing))
            self.assertEqual((wrong_missing, wrong_present), (0, 0),
                             "wrong answers at version %d: %d stored digests answered missing, "
                             "%d absent ones present" % (version, wrong_missing, wrong_present))
            return 200, None
        self.assertEqual(response.status_code, 503, response.text)
        return 503, response.json()["error"]["code"]

    def heads(self, server, items):
        """HEAD of each digest: a 200 or 404 must be the exact answer at the
        version it carries; anything else a 503."""
        truth = support.Truth(self.catalog.db)
        statuses = set()
        for d in items:
            response = self.session.head(server.url + "/v1/default/blobs/sha256:" + d.hex(),
                                         timeout=10)
            if response.status_code in (200, 404):
                version = int(response.headers["X-Abf-Catalog-Version"])
                self.assertEqual(response.status_code == 200, truth.exists(d, version),
                                 "HEAD %s at version %d" % (d.hex(), version))
            else:
                self.assertEqual(response.status_code, 503)
            statuses.add(response.status_code)
        return statuses

    def readyz(self, server):
        return self.session.get(server.url + "/readyz", timeout=10).status_code

    def assert_upgrade_needed(self, server):
        self.assertEqual(self.ask(server, X + NEVER[:10]), (503, "catalog_upgrade_needed"))
        response = self.session.post(server.url + "/v1/default/find-missing", data=b"".join(X),
                                     headers=OCTETS, timeout=60)
        self.assertIn("abf catalog upgrade", response.json()["error"]["message"])
        self.assertEqual(self.readyz(server), 503)

    def run_attack(self, server, advance, head_past):
        """The attack: the backup restored (version 1), then advanced to
        version 2 with Y (and to 3 with Z when `head_past`); every answer
        must be exact or a 503."""
        self.ask(server, X + NEVER[:10])
        copy_catalog(self.backup, self.catalog.db)
        self.assertEqual(advance(Y), 2)
        if head_past:
            self.assertEqual(advance(Z), 3)
        items = Y + X + FIRST[:100] + Z + NEVER[:10]
        status, code = self.ask(server, items)
        statuses = self.heads(server, Y[:20] + X[:20])
        return status, code, statuses

    def advance_with_abf(self, items):
        return self.catalog.add(items)  # `abf catalog add` upgrades to schema 3 first

    def advance_as_schema_two(self, items):
        return add_as_schema_two(self.catalog.db, items)

    def test_a_schema_two_catalog_gets_no_answer_at_its_head(self):
        server = self.serve()
        warned = [line for line in server.log_lines()
                  if line.get("event") == "catalog_upgrade_needed"]
        self.assertEqual(len(warned), 1, server.log_text())
        self.assert_upgrade_needed(server)
        self.assertEqual(self.heads(server, X[:5] + NEVER[:5]), {503})
        # Upgraded under the server: noticed at the next request, answered.
        support.run_abf("catalog", "upgrade", "--db", self.catalog.db)
        self.assertEqual(self.ask(server, X + FIRST[:100] + NEVER[:10]), (200, None))
        self.assertEqual(self.readyz(server), 200)

    def test_restored_and_advanced_by_a_schema_two_writer(self):
        for indexed in (False, True):
            for head_past in (False, True):
                with self.subTest(index=indexed, head_past=head_past):
                    self.fresh()
                    extra = ("--index", self.index) if indexed else ()
                    server = self.serve(*extra)
                    status, code, statuses = self.run_attack(server, self.advance_as_schema_two,
                                                             head_past)
                    self.assertEqual(schema_of(self.catalog.db), 2)
                    self.assertEqual((status, code), (503, "catalog_upgrade_needed"))
                    self.assertEqual(statuses, {503})
                    self.assertEqual(self.readyz(server), 503)

    def test_restored_and_advanced_by_abf_catalog_add(self):
        """The advance upgrades the restored catalog to schema 3: its
        contents are recorded now, and version 2 holds other digests than
        the snapshot (and the index) of the old version 2."""
        for indexed in (False, True):
            for head_past in (False, True):
                with self.subTest(index=indexed, head_past=head_past):
                    self.fresh()
                    extra = ("--index", self.index) if indexed else ()
                    server = self.serve(*extra)
                    status, code, statuses = self.run_attack(server, self.advance_with_abf,
                                                             head_past)
                    self.assertEqual(schema_of(self.catalog.db), 3)
                    expected = "index_mismatch" if extra else "snapshot_mismatch"
                    self.assertEqual((status, code), (503, expected))
                    self.assertEqual(statuses, {503})
                    self.assertEqual(self.readyz(server), 503)
                    # A snapshot (and index) of the new history answers again.
                    self.catalog.build()
                    if extra:
                        support.run_abf("index", "--db", self.catalog.db, "-o",
                                        self.index + ".new")
                        os.replace(self.index + ".new", self.index)
                    reload = self.session.post(server.url + "/admin/reload", timeout=60)
                    self.assertEqual(reload.status_code, 200, reload.text)
                    self.assertEqual(self.ask(server, Y + X + Z + NEVER[:10]), (200, None))
                    self.assertEqual(self.readyz(server), 200)

    def test_a_snapshot_older_than_the_head_seen(self):
        """The snapshot of version 1 and a server that saw version 2 (X) at
        its head: the X it would have held as added was the old history's."""
        self.catalog.build(version=1)
        server = self.serve()
        self.ask(server, X + NEVER[:10])  # exact, or a 503
        copy_catalog(self.backup, self.catalog.db)
        self.assertEqual(self.advance_with_abf(Y), 2)
        self.assertEqual(self.ask(server, Y + X + FIRST[:50] + NEVER[:10]), (200, None))
        self.assertEqual(self.heads(server, Y[:20] + X[:20]), {200, 404})

    def fresh(self):
        """A fresh catalog, backup, snapshot and index for each subtest but
        the first (setUp made that one)."""
        if not self.servers:
            return
        self.tearDown()
        self.setUp()


class IndexRewrittenAlone(unittest.TestCase):
    """A rewrite that changed the index's version but not the snapshot's: the
    503 says the index is at fault (it named the snapshot before)."""

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-rewrite-index-")
        self.session = requests.Session()
        self.addCleanup(self.session.close)

    def test_the_503_names_the_index(self):
        catalog = support.Catalog(self.dir, expected_items=20000)
        catalog.add(FIRST)  # version 1
        index = os.path.join(self.dir, "catalog.abfx")
        support.run_abf("index", "--db", catalog.db, "-o", index)  # of version 1
        catalog.remove(FIRST[:1])
        catalog.add(X)  # version 3 = FIRST - FIRST[0] + X
        catalog.build()  # the snapshot of version 3
        server = support.Server("--snapshot", catalog.snapshot, "--db", catalog.db,
                                "--index", index, "--idle-timeout", 2)
        try:
            response = self.session.post(server.url + "/v1/default/find-missing",
                                         data=b"".join(X), headers=OCTETS, timeout=60)
            self.assertEqual(response.status_code, 200, response.text)
            db = sqlite3.connect(catalog.db)
            with db:
                # Version 1 now lacks FIRST[0] (removed at 2 anyway): the
                # index's version changed, the snapshot's did not.
                db.execute("DELETE FROM artifacts WHERE digest = ?", (FIRST[0],))
                db.execute("UPDATE versions SET item_count = item_count - 1 WHERE version = 1")
            db.close()
            catalog.add(NEVER[:1])  # the head moves on (version 4): the index is checked again
            response = self.session.post(server.url + "/v1/default/find-missing",
                                         data=b"".join(X), headers=OCTETS, timeout=60)
            self.assertEqual(response.status_code, 503, response.text)
            error = response.json()["error"]
            self.assertEqual(error["code"], "index_mismatch", response.text)
            self.assertIn("index", error["message"])
            self.assertNotIn("snapshot", error["message"])
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
