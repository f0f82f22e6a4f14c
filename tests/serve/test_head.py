"""`abf serve` answers at the catalog's head (docs/protocol.md section 8): with a
snapshot older than its catalog, the digests added since are never answered
missing, every answer carries the version it is exact for, and the lag is
reported. Every answer is checked against the catalog's SQLite file."""

import os
import random
import shutil
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("requests")
import requests  # noqa: E402

FIRST = support.digests("first", 2000)     # version 1, in the snapshot
SECOND = support.digests("second", 1000)   # version 2, added after it
NEVER = support.digests("never", 1000)


def find_missing(session, url, items, tenant="default"):
    response = session.post(url + "/v1/%s/find-missing" % tenant, data=b"".join(items),
                            headers={"Content-Type": "application/octet-stream"}, timeout=30)
    if response.status_code != 200:
        raise AssertionError("find-missing: %d %s" % (response.status_code, response.text))
    body = response.content
    return ([body[i:i + 32] for i in range(0, len(body), 32)],
            int(response.headers["X-Abf-Catalog-Version"]))


class SnapshotOlderThanCatalog(unittest.TestCase):
    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-head-")
        self.catalog = support.Catalog(self.dir, expected_items=20000)
        self.catalog.add(FIRST)
        self.catalog.build()  # version 1
        self.session = requests.Session()

    def tearDown(self):
        self.session.close()

    def test_digests_added_after_the_snapshot_are_present(self):
        """The issue's reproduction: catalog add makes version 2 after the
        snapshot of version 1 is served."""
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 2)
        try:
            self.catalog.add(SECOND)  # version 2, while serving
            items = FIRST[:500] + SECOND + NEVER
            random.Random(1).shuffle(items)
            missing, version = find_missing(self.session, server.url, items)
            self.assertEqual(version, 2)
            truth = support.Truth(self.catalog.db)
            self.assertEqual(missing, truth.missing(items, 2))
            self.assertEqual(set(missing), set(NEVER))  # 0 wrong answers
            # /readyz and /metrics tell how far the snapshot lags; still ready
            # (answers are exact at the head).
            ready = self.session.get(server.url + "/readyz", timeout=10).json()
            self.assertEqual(ready["tenants"]["default"], {
                "ready": True, "catalog_version": 1,
                "lag": {"head_version": 2, "versions": 1, "digests_added": 1000}})
            text = self.session.get(server.url + "/metrics", timeout=10).text
            for name, value in (("artifact_bloom_serve_catalog_head_version", 2),
                                ("artifact_bloom_serve_snapshot_lag_versions", 1),
                                ("artifact_bloom_serve_snapshot_lag_digests", 1000)):
                self.assertEqual(support.metric(text, name, tenant="default"), value, name)
            for digest in SECOND[:20]:
                response = self.session.get(server.url + "/v1/default/blobs/sha256:" +
                                            digest.hex(), timeout=10)
                self.assertEqual(response.status_code, 200, response.text)
                self.assertEqual(response.json()["catalog_version"], 2)
            # The dedup command agrees: none of version 2's digests are new.
            path = os.path.join(self.dir, "candidates.txt")
            with open(path, "w") as out:
                out.write("".join(d.hex() + "\n" for d in items))
            result = support.run_abf("dedup", "-s", self.catalog.snapshot, "--db",
                                     self.catalog.db, "-i", path)
            news = [bytes.fromhex(line) for line in result.stdout.decode().split()]
            self.assertEqual(sorted(news), sorted(NEVER))
            self.assertIn(b"behind the catalog by 1 version and 1,000 added digests:", result.stderr)
        finally:
            self.session.close()  # no idle keep-alive connection for the stop to wait on
            self.assertEqual(server.stop(), 0)

    def test_no_digest_is_missing_once_its_catalog_add_returned(self):
        """Clients query while a writer adds digests in a loop and --follow
        republishes meanwhile; a digest whose `catalog add` has returned is
        never answered missing. The adds are bounded (25, or 8 seconds); then
        the clients keep asking until the follower has rebuilt at least once
        and has caught up (the snapshot lags by fewer than 5 versions), and
        until a request that started after that has been answered. A fast
        machine finishes the adds before the follower's first poll (1 s), a
        slow one rebuilds during them: both are waited for, never assumed."""
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--head-cache-digests", 300,  # crossed midway
                                "--follow", "--follow-lag-versions", 5,  # rebuilds meanwhile
                                "--idle-timeout", 2)
        committed = []  # digests whose add returned
        lock = threading.Lock()
        done = threading.Event()
        failures = []
        asked = [0]
        clients = 3

        def client(seed):
            rng = random.Random(seed)
            session = requests.Session()
            try:
                while not done.is_set():
                    with lock:
                        pool = list(committed)
                    if not pool:
                        time.sleep(0.005)
                        continue
                    items = [rng.choice(pool) for _ in range(50)] + NEVER[:10]
                    missing, version = find_missing(session, server.url, items)
                    wrong = [d for d in missing if d not in NEVER]
                    if wrong:
                        failures.append((version, [d.hex() for d in wrong[:3]]))
                    with lock:
                        asked[0] += 1
            except Exception as error:  # noqa: BLE001
                failures.append(repr(error))
            finally:
                session.close()

        def answered():
            with lock:
                return asked[0]

        def follower():
            return self.session.get(server.url + "/readyz", timeout=10).json()["tenants"]["default"]

        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(clients)]
        for thread in threads:
            thread.start()
        seen = {}
        try:
            deadline = time.monotonic() + 8
            for k in range(25):
                if time.monotonic() > deadline:
                    break
                batch = support.digests("loop-%d" % k, 20)
                self.catalog.add(batch)
                with lock:
                    committed.extend(batch)

            def caught_up():
                if failures:
                    return True  # reported below
                seen.update(follower())
                return seen["catalog_version"] > 1 and seen["lag"]["versions"] < 5

            support.wait_until(caught_up, what=lambda: "a --follow rebuild that catches up "
                               "(last /readyz: %r)" % seen)
            # At most one request per client was in flight: one more answer
            # than that started after the rebuild was seen.
            mark = answered()
            support.wait_until(lambda: failures or answered() > mark + clients,
                               what="the clients to answer after the rebuild")
        finally:
            done.set()
            for thread in threads:
                thread.join(timeout=30)
            self.session.close()
            status = server.stop()
        self.assertEqual(failures, [])
        self.assertGreater(asked[0], 0)
        self.assertEqual(status, 0)
        rebuilt = [line for line in support_log_lines(server)
                   if line.get("event") == "snapshot_rebuilt"]
        self.assertGreaterEqual(len(rebuilt), 1)
        self.assertEqual(rebuilt[-1]["catalog_version"], seen["catalog_version"])


class Follow(unittest.TestCase):
    """`abf serve --follow` rebuilds and publishes the snapshot once it lags:
    incrementally after additions (the file equals a fresh build, byte for
    byte), fully after a removal; answers stay exact and the lag returns
    to 0."""

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-follow-")
        self.catalog = support.Catalog(self.dir, expected_items=20000)
        self.catalog.add(FIRST)
        self.catalog.build()  # version 1
        self.session = requests.Session()

    def tearDown(self):
        self.session.close()

    def wait_for_lag_zero(self, server, version):
        seen = {}

        def at_version():
            seen.update(self.session.get(server.url + "/readyz",
                                         timeout=10).json()["tenants"]["default"])
            return seen["catalog_version"] == version and seen["lag"]["versions"] == 0

        support.wait_until(at_version, what=lambda: "the snapshot of version %d with lag 0 "
                           "(last /readyz: %r)" % (version, seen))
        return dict(seen)

    def test_follow_republishes_and_the_lag_returns_to_zero(self):
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--follow", "--follow-lag-versions", 1, "--idle-timeout", 2)
        try:
            self.catalog.add(SECOND)  # version 2
            missing, version = find_missing(self.session, server.url, SECOND + NEVER)
            self.assertEqual((set(missing), version), (set(NEVER), 2))
            tenant = self.wait_for_lag_zero(server, 2)
            self.assertEqual(tenant["lag"], {"head_version": 2, "versions": 0, "digests_added": 0})
            # Incremental, and the file is what a fresh build of version 2 makes.
            fresh = self.catalog.build(output=os.path.join(self.dir, "fresh.abf"), version=2)
            with open(fresh, "rb") as a, open(self.catalog.snapshot, "rb") as b:
                self.assertEqual(a.read(), b.read())
            missing, version = find_missing(self.session, server.url, FIRST + SECOND + NEVER)
            self.assertEqual((set(missing), version), (set(NEVER), 2))
            # A removal: a full build drops the removed digests.
            self.catalog.remove(SECOND[:100])  # version 3
            self.wait_for_lag_zero(server, 3)
            missing, version = find_missing(self.session, server.url, SECOND + NEVER)
            self.assertEqual((set(missing), version), (set(SECOND[:100] + NEVER), 3))
            # The rebuild is counted just after it is published (what /readyz
            # shows): waited for, then checked to be exactly two.
            def rebuilds():
                text = self.session.get(server.url + "/metrics", timeout=10).text
                return support.metric(text, "artifact_bloom_serve_follow_rebuilds_total",
                                      tenant="default", result="ok")
            support.wait_until(lambda: rebuilds() >= 2, what="two counted rebuilds")
            self.assertEqual(rebuilds(), 2)
        finally:
            self.session.close()
            self.assertEqual(server.stop(), 0)
        kinds = [line["kind"] for line in support_log_lines(server) if
                 line.get("event") == "snapshot_rebuilt"]
        self.assertEqual(kinds, ["incremental", "full"])


class FollowOneLine(unittest.TestCase):
    """`abf serve --follow` of a one-line snapshot or set (protocol 3, --layout
    blocked) rebuilds it in its own protocol and shard count: the rebuilt
    files are protocol 3, a single snapshot (advanced incrementally) equals a
    fresh `abf build --from-catalog --layout blocked` byte for byte, and every
    answer stays exact."""

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-follow-blocked-")
        self.catalog = support.Catalog(self.dir, expected_items=20000)
        self.catalog.add(FIRST)  # version 1
        self.session = requests.Session()
        self.addCleanup(self.session.close)

    def build(self, output, shards=None, version=None):
        args = ["build", "--from-catalog", self.catalog.db, "--expected-items", 20000,
                "--fpp", 0.01, "--layout", "blocked", "--output", output]
        if shards:
            args += ["--shards", shards]
        if version is not None:
            args += ["--catalog-version", version]
        support.run_abf(*args)
        return output

    def inspect(self, path):
        import json
        return json.loads(support.run_abf("inspect", path, "--json").stdout)

    def follow(self, snapshot, shards, kind):
        server = support.Server("--snapshot", snapshot, "--db", self.catalog.db,
                                "--follow", "--follow-lag-versions", 1, "--idle-timeout", 2)
        try:
            version = self.catalog.add(support.digests("blocked-%s" % shards, 500,
                                                       start=1000 * (shards or 1)))
            seen = {}

            def at_version():
                seen.update(self.session.get(server.url + "/readyz",
                                             timeout=10).json()["tenants"]["default"])
                return seen["catalog_version"] == version and seen["lag"]["versions"] == 0

            support.wait_until(at_version, what=lambda: "the rebuilt snapshot of version %d "
                               "(last /readyz: %r)" % (version, seen))
            truth = support.Truth(self.catalog.db)
            asked = FIRST + NEVER + support.digests("blocked-%s" % shards, 500,
                                                    start=1000 * (shards or 1))
            missing, answered_version = find_missing(self.session, server.url, asked)
            self.assertEqual(answered_version, version)
            self.assertEqual(set(missing), set(truth.missing(asked, version)))
        finally:
            self.assertEqual(server.stop(), 0)
        kinds = [line["kind"] for line in support_log_lines(server)
                 if line.get("event") == "snapshot_rebuilt"]
        self.assertEqual(kinds, [kind])
        return version

    def test_a_one_line_snapshot_is_rebuilt_in_protocol_3(self):
        snapshot = self.build(os.path.join(self.dir, "one.abf"))
        version = self.follow(snapshot, None, "incremental")
        info = self.inspect(snapshot)
        self.assertEqual(info["hash_protocol_version"], 3)
        self.assertEqual(info["catalog_version"], version)
        fresh = self.build(os.path.join(self.dir, "fresh.abf"), version=version)
        with open(fresh, "rb") as a, open(snapshot, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_a_one_line_set_is_rebuilt_with_its_shards_in_protocol_3(self):
        snapshot = self.build(os.path.join(self.dir, "set.abfs"), shards=3)
        version = self.follow(snapshot, 3, "full")
        info = self.inspect(snapshot)
        self.assertEqual(info["hash_protocol_version"], 3)
        self.assertEqual(info["shard_count"], 3)
        self.assertEqual(info["catalog_version"], version)
        fresh = self.inspect(self.build(os.path.join(self.dir, "fresh.abfs"), shards=3,
                                        version=version))
        self.assertEqual(info["content_fingerprint"], fresh["content_fingerprint"])
        self.assertEqual([s["payload_checksum"] for s in info["shards"]],
                         [s["payload_checksum"] for s in fresh["shards"]])


def support_log_lines(server):
    import json
    return [json.loads(line) for line in server.last_log.splitlines() if line.startswith("{")]


class CatalogRewrittenUnderTheServer(unittest.TestCase):
    """A backup restored under a running server, then advanced again: the same
    version numbers hold other digests. The server must notice (each request
    reads the head's recorded content), never answer one of the new history's
    digests missing, and stop answering (503, unready) when its snapshot's
    own version changed."""

    def setUp(self):
        self.dir = support.temp_dir(self, "abf-serve-rewrite-")
        self.catalog = support.Catalog(self.dir, expected_items=20000)
        self.catalog.add(FIRST)
        self.catalog.build()  # version 1
        self.backup = os.path.join(self.dir, "backup.db")
        self.session = requests.Session()

    def tearDown(self):
        self.session.close()

    def restore(self):
        """What `sqlite3 catalog.db ".restore backup.db"` does: the backup's
        pages written into the live file."""
        import sqlite3
        source = sqlite3.connect(self.backup)
        target = sqlite3.connect(self.catalog.db)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    def take_backup(self):
        import sqlite3
        source = sqlite3.connect(self.catalog.db)
        target = sqlite3.connect(self.backup)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    def test_the_added_digests_held_are_dropped_after_a_restore(self):
        x, y = support.digests("x", 300), support.digests("y", 300)
        self.take_backup()  # at version 1
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 2)
        try:
            self.assertEqual(self.catalog.add(x), 2)
            missing, version = find_missing(self.session, server.url, x + NEVER[:10])
            self.assertEqual((set(missing), version), (set(NEVER[:10]), 2))  # X held now
            self.restore()
            self.assertEqual(self.catalog.add(y), 2)  # another version 2
            items = FIRST[:100] + y + x + NEVER[:10]
            missing, version = find_missing(self.session, server.url, items)
            self.assertEqual(version, 2)
            truth = support.Truth(self.catalog.db)
            self.assertEqual(missing, truth.missing(items, 2))
            self.assertEqual(set(missing), set(x + NEVER[:10]))  # no Y digest missing
            self.assertEqual(self.session.get(server.url + "/readyz", timeout=10).status_code, 200)
        finally:
            server.stop()

    def test_a_snapshot_whose_version_was_rewritten_answers_nothing(self):
        x, y = support.digests("x", 300), support.digests("y", 300)
        self.take_backup()  # at version 1
        self.catalog.add(x)
        self.catalog.build()  # the snapshot of version 2 = FIRST + X
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 2)
        try:
            missing, _ = find_missing(self.session, server.url, y)
            self.assertEqual(set(missing), set(y))
            self.restore()
            self.catalog.add(y)  # version 2 = FIRST + Y: not the snapshot's
            response = self.session.post(
                server.url + "/v1/default/find-missing", data=b"".join(y),
                headers={"Content-Type": "application/octet-stream"}, timeout=30)
            self.assertEqual(response.status_code, 503, response.text)
            self.assertEqual(response.json()["error"]["code"], "snapshot_mismatch", response.text)
            for digest in y[:5]:
                head = self.session.head(server.url + "/v1/default/blobs/sha256:" + digest.hex(),
                                         timeout=10)
                self.assertNotEqual(head.status_code, 404)
            self.assertEqual(self.session.get(server.url + "/readyz", timeout=10).status_code, 503)
            self.catalog.add(NEVER[:10])  # version 3: still refused
            response = self.session.post(
                server.url + "/v1/default/find-missing", data=b"".join(y),
                headers={"Content-Type": "application/octet-stream"}, timeout=30)
            self.assertEqual(response.status_code, 503, response.text)
            # A snapshot of the new history, reloaded, answers again, exactly.
            self.catalog.build()
            reload = self.session.post(server.url + "/admin/reload", timeout=60)
            self.assertEqual(reload.status_code, 200, reload.text)
            items = y + x + NEVER[:20]
            missing, version = find_missing(self.session, server.url, items)
            self.assertEqual(missing, support.Truth(self.catalog.db).missing(items, version))
            self.assertEqual(self.session.get(server.url + "/readyz", timeout=10).status_code, 200)
        finally:
            server.stop()

    def test_follow_rebuilds_in_full_after_the_snapshots_version_was_rewritten(self):
        """The same restore and advance under `--follow`: the snapshot of the
        old version 2 cannot be advanced, so the head is built in full and
        published, and the tenant answers again, exactly, without a reload."""
        x, y = support.digests("x", 300), support.digests("y", 300)
        self.take_backup()  # at version 1
        self.catalog.add(x)
        self.catalog.build()  # the snapshot of version 2 = FIRST + X
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--follow", "--follow-lag-versions", 1, "--idle-timeout", 2)
        try:
            self.restore()
            self.catalog.add(y)  # version 2 = FIRST + Y: not the snapshot's
            self.catalog.add(NEVER[:10])  # version 3
            items = y + x + NEVER[:20]

            def exact():
                response = self.session.post(
                    server.url + "/v1/default/find-missing", data=b"".join(items),
                    headers={"Content-Type": "application/octet-stream"}, timeout=30)
                if response.status_code == 503:
                    return None  # the rewrite seen, the rebuild not yet published
                self.assertEqual(response.status_code, 200, response.text)
                version = int(response.headers["X-Abf-Catalog-Version"])
                body = response.content
                missing = [body[i:i + 32] for i in range(0, len(body), 32)]
                return missing, version
            missing, version = support.wait_until(exact, what="an answer after the rebuild")
            self.assertEqual(version, 3)
            self.assertEqual(missing, support.Truth(self.catalog.db).missing(items, 3))
            self.assertEqual(set(missing), set(x + NEVER[10:20]))
            self.assertEqual(self.session.get(server.url + "/readyz", timeout=10).status_code, 200)
        finally:
            self.assertEqual(server.stop(), 0)
        rebuilt = [line for line in support_log_lines(server)
                   if line.get("event") == "snapshot_rebuilt"]
        self.assertEqual([(line["kind"], line["catalog_version"]) for line in rebuilt],
                         [("full", 3)])

    def test_a_catalog_replaced_by_rename_is_not_read_from_the_old_file(self):
        y = support.digests("y", 300)
        self.take_backup()
        server = support.Server("--snapshot", self.catalog.snapshot, "--db", self.catalog.db,
                                "--idle-timeout", 2)
        try:
            find_missing(self.session, server.url, y)
            restored = os.path.join(self.dir, "restored.db")
            shutil.copyfile(self.backup, restored)
            os.replace(restored, self.catalog.db)
            self.catalog.add(y)  # into the new file
            response = self.session.post(
                server.url + "/v1/default/find-missing", data=b"".join(y),
                headers={"Content-Type": "application/octet-stream"}, timeout=30)
            self.assertEqual(response.status_code, 503, response.text)
            self.assertEqual(response.json()["error"]["code"], "catalog_unavailable", response.text)
            self.assertEqual(self.session.get(server.url + "/readyz", timeout=10).status_code, 503)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
