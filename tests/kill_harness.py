#!/usr/bin/python3
"""SIGKILL at random moments: nothing half-written, nothing left behind.

Runs `abf build`, `abf merge`, `abf catalog add`, `abf catalog remove`,
`abf build --from-catalog`, `abf dedup`, `abf index` and `abf index --shards` on inputs that take some tens of
milliseconds, and kills each run with SIGKILL at a moment drawn uniformly
between 0 and the command's uninterrupted duration (measured here, first).
Every trial starts from the same old state; afterwards:

  - every output path holds the old file, byte for byte (or nothing, when
    there was none), or the complete new one: byte-identical to what an
    uninterrupted run writes (a run that ended before the kill must have
    succeeded and written it);
  - no temporary file is left in the folder. AtomicFile's anonymous
    temporaries (O_TMPFILE) have no name until commit(). A share of the
    trials runs with ABF_NO_O_TMPFILE=1, which forces the named temporaries
    `.<name>.tmp.XXXXXX` of filesystems without O_TMPFILE: SIGKILL runs no
    code, so those can be left; they are counted and reported (and
    removed), never a pass by hiding them, and the output must still be
    old or new. An anonymous file is named (linked to a temporary name) in
    commit() just before its rename: a kill between those two calls leaves
    that name holding the complete new file; such a leftover is reported
    apart, and anything else left by an anonymous trial is a failure;
  - a catalog passes PRAGMA integrity_check, its versions are 0..latest
    with no gap, and it holds exactly the old versions, or the old ones and
    the whole new version: every row of the change or none (compared with
    the digests the add or remove was given); `abf catalog stats` (a
    read-only reader) opens it at once;
  - inputs are unchanged (the catalog that build --from-catalog and dedup
    read, byte for byte).

Seeded and bounded: --trials per command (default 100), --seed (default
14, or ABF_KILL_SEED), and a deadline (--deadline seconds, default 1700)
past which it stops and fails. Exit 0 when every trial passed, 1 otherwise.
Needs ABF_CLI (the abf binary); CTest runs it (tests/CMakeLists.txt).
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

KILLED = -signal.SIGKILL
CATALOG_FILES = ("-wal", "-shm", "-journal")  # SQLite's own, beside a database


def abf_binary():
    path = os.environ.get("ABF_CLI")
    if not path or not os.path.exists(path):
        sys.stderr.write("ABF_CLI must name the abf binary (got %r)\n" % path)
        sys.exit(1)
    return os.path.abspath(path)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def sha(data):
    return hashlib.sha256(data).hexdigest()[:16] if data is not None else None


def run_to_end(argv, cwd, env=None):
    """An uninterrupted run: (seconds, stderr); fails the harness unless it succeeds."""
    start = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, timeout=120)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit("uninterrupted run failed (%d): %s\n%s" % (
            result.returncode, " ".join(argv), result.stderr.decode(errors="replace")))
    return seconds


class Stats:
    def __init__(self, name):
        self.name = name
        self.trials = 0
        self.named = 0             # trials with ABF_NO_O_TMPFILE=1
        self.killed = 0            # died of the SIGKILL
        self.finished = 0          # ended (exit 0) before the kill
        self.old = 0               # outputs found as before
        self.new = 0               # outputs found complete and new
        self.named_leftovers = 0   # named temporaries left by a named trial
        self.named_left_trials = 0
        self.commit_window = 0     # an anonymous file's commit() name, left holding the new file
        self.orphan_shards = 0     # build --shards: shard files no manifest names
        self.orphan_trials = 0
        self.failures = []
        self.duration = 0.0
        self.seconds = 0.0

    def fail(self, trial, message):
        self.failures.append("%s trial %d: %s" % (self.name, trial, message))

    def row(self):
        return {
            "command": self.name, "trials": self.trials, "named_temporaries": self.named,
            "killed": self.killed, "finished_before_kill": self.finished,
            "outputs_old": self.old, "outputs_new": self.new,
            "named_leftovers": self.named_leftovers,
            "named_trials_with_leftovers": self.named_left_trials,
            "commit_window_leftovers": self.commit_window,
            "orphan_shards": self.orphan_shards,
            "trials_with_orphan_shards": self.orphan_trials,
            "failures": len(self.failures),
            "uninterrupted_ms": round(self.duration * 1000, 1),
            "seconds": round(self.seconds, 1),
        }


class Case:
    """One command run again and again in its own folder."""

    name = ""

    def __init__(self, root, abf):
        self.abf = abf
        self.dir = os.path.join(root, self.name.replace(" ", "-").replace("--", ""))
        os.makedirs(self.dir)
        self.argv = []

    def path(self, name):
        return os.path.join(self.dir, name)

    # Filled in by each case.
    def prepare(self):
        raise NotImplementedError

    def reset(self, rng):
        """Puts the old state back before a trial."""
        raise NotImplementedError

    def check(self, stats, trial, named, completed):
        """Compares what the trial left with the old and the new state."""
        raise NotImplementedError

    def env(self, named):
        env = dict(os.environ)
        env.pop("ABF_NO_O_TMPFILE", None)
        if named:
            env["ABF_NO_O_TMPFILE"] = "1"
        return env

    def calibrate(self):
        """Three uninterrupted runs from the old state: their median time."""
        times = []
        for _ in range(3):
            self.reset(None)
            times.append(run_to_end(self.argv, self.dir, self.env(False)))
            self.after_calibration_run()
        return sorted(times)[1]

    def after_calibration_run(self):
        pass

    def leftovers(self, expected):
        return sorted(set(os.listdir(self.dir)) - set(expected))


class SnapshotOutput(Case):
    """A command whose one output file is written through AtomicFile."""

    output = ""
    inputs = ()

    def prepare(self):
        self.make_inputs()
        self.old_bytes = self.make_old()
        # The new file, as an uninterrupted run writes it.
        self.reset(None)
        run_to_end(self.argv, self.dir, self.env(False))
        self.new_bytes = read(self.path(self.output))
        assert self.new_bytes and self.new_bytes != self.old_bytes
        self.check_new()
        self.input_hashes = {name: sha(read(self.path(name))) for name in self.inputs}
        self.had_old = True

    def after_calibration_run(self):
        if read(self.path(self.output)) != self.new_bytes:
            raise SystemExit("%s: two uninterrupted runs wrote different files" % self.name)

    def check_new(self):
        """The new file loads: abf inspect reads it whole."""
        subprocess.run([self.abf, "inspect", self.path(self.output)], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)

    def reset(self, rng):
        self.had_old = rng is None or rng.random() >= 0.2  # one trial in five: no old file
        out = self.path(self.output)
        if self.had_old:
            write(out, self.old_bytes)
        elif os.path.exists(out):
            os.remove(out)

    def check(self, stats, trial, named, completed):
        out = self.path(self.output)
        found = read(out)
        old = self.old_bytes if self.had_old else None
        if found == self.new_bytes:
            stats.new += 1
        elif found == old:
            stats.old += 1
            if completed:
                stats.fail(trial, "the run succeeded but the output is the old one")
        else:
            stats.fail(trial, "%s is neither the old nor the new file (%s bytes, sha %s)" % (
                self.output, None if found is None else len(found), sha(found)))
        expected = set(self.inputs) | ({self.output} if found is not None else set())
        left = self.leftovers(expected)
        named_left = 0
        for name in left:
            full = self.path(name)
            is_temp = name.startswith("." + self.output + ".tmp.")
            if is_temp and named:
                named_left += 1
            elif is_temp and read(full) == self.new_bytes and found == old:
                # Named in commit() and killed before the rename.
                stats.commit_window += 1
            else:
                stats.fail(trial, "left %s (%d bytes) in the folder" % (
                    name, os.path.getsize(full)))
            os.remove(full)
        if named_left:
            stats.named_leftovers += named_left
            stats.named_left_trials += 1
        for name, digest in self.input_hashes.items():
            if sha(read(self.path(name))) != digest:
                stats.fail(trial, "input %s changed" % name)


def random_bin(path, count, rng):
    write(path, rng.randbytes(32 * count))


class Build(SnapshotOutput):
    name = "build"
    output = "out.abf"
    inputs = ("digests.bin",)

    def make_inputs(self):
        rng = random.Random("build inputs")
        random_bin(self.path("digests.bin"), 400_000, rng)
        random_bin(self.path("other.bin"), 1000, rng)
        self.argv = [self.abf, "build", "-n", "2000000", "-p", "0.01", "-f", "bin",
                     "-i", "digests.bin", "-o", self.output]

    def make_old(self):
        run_to_end([self.abf, "build", "-n", "2000000", "-p", "0.01", "-f", "bin",
                    "-i", "other.bin", "-o", "old.abf"], self.dir)
        data = read(self.path("old.abf"))
        os.remove(self.path("old.abf"))
        os.remove(self.path("other.bin"))
        return data


class Merge(SnapshotOutput):
    name = "merge"
    output = "out.abf"
    inputs = ("part-0.abf", "part-1.abf", "part-2.abf")

    def make_inputs(self):
        rng = random.Random("merge inputs")
        for i in range(3):
            random_bin(self.path("part.bin"), 100_000, rng)
            run_to_end([self.abf, "build", "-n", "2000000", "-p", "0.01", "-f", "bin",
                        "-i", "part.bin", "-o", "part-%d.abf" % i], self.dir)
        os.remove(self.path("part.bin"))
        self.argv = [self.abf, "merge", "part-0.abf", "part-1.abf", "part-2.abf",
                     "-o", self.output]

    def make_old(self):
        run_to_end([self.abf, "merge", "part-0.abf", "part-1.abf", "-o", "old.abf"], self.dir)
        data = read(self.path("old.abf"))
        os.remove(self.path("old.abf"))
        return data


class BuildSet(Case):
    """build --shards: a manifest and its shard files, written shards first."""

    name = "build --shards"
    manifest = "out.abfs"
    shard_suffix = ".abf"
    inputs = ("digests.bin",)

    def prepare(self):
        rng = random.Random("set inputs")
        random_bin(self.path("digests.bin"), 400_000, rng)
        random_bin(self.path("other.bin"), 1000, rng)
        self.argv = [self.abf, "build", "-n", "2000000", "-p", "0.01", "--shards", "3",
                     "-f", "bin", "-i", "digests.bin", "-o", self.manifest]
        run_to_end([self.abf, "build", "-n", "2000000", "-p", "0.01", "--shards", "3",
                    "-f", "bin", "-i", "other.bin", "-o", self.manifest], self.dir)
        os.remove(self.path("other.bin"))
        self.old_files = {n: read(self.path(n)) for n in os.listdir(self.dir)
                          if n.startswith(self.manifest)}
        self.old_set = self.identity()
        self.had_old = True
        self.reset(None)
        run_to_end(self.argv, self.dir)
        self.new_set = self.identity()
        assert self.new_set and self.new_set != self.old_set
        subprocess.run([self.abf, "inspect", self.path(self.manifest)], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)

    def after_calibration_run(self):
        if self.identity() != self.new_set:
            raise SystemExit("%s: two uninterrupted runs wrote different sets" % self.name)

    def shard_names(self):
        data = read(self.path(self.manifest))
        if data is None or len(data) < 128:
            return []
        count = int.from_bytes(data[8:12], "little")
        # formatVersion 2 puts the set's content fingerprint before the entries.
        body = 128 + (16 if int.from_bytes(data[4:8], "little") == 2 else 0)
        names, at = [], body + 32 * count
        for i in range(count):
            length = int.from_bytes(data[body + 32 * i + 24:body + 32 * i + 28], "little")
            names.append(data[at:at + length].decode())
            at += length
        return names

    def identity(self):
        """What the set is, less its random build id: the manifest's fields and
        shard entries, and each shard file's bytes (None: no manifest)."""
        data = read(self.path(self.manifest))
        if data is None:
            return None
        count = int.from_bytes(data[8:12], "little")
        fields = data[:72] + data[80:112]   # less the checksums and the build id
        entries = [data[128 + 32 * i:128 + 32 * i + 24] for i in range(count)]
        shards = [sha(read(self.path(name))) for name in self.shard_names()]
        return (fields, entries, shards)

    def reset(self, rng):
        self.had_old = rng is None or rng.random() >= 0.2
        for name in os.listdir(self.dir):
            if name.startswith(self.manifest) or name.startswith("." + self.manifest):
                os.remove(self.path(name))
        if self.had_old:
            for name, data in self.old_files.items():
                write(self.path(name), data)

    def check(self, stats, trial, named, completed):
        found = self.identity()
        old = self.old_set if self.had_old else None
        if found == self.new_set:
            stats.new += 1
        elif found == old:
            stats.old += 1
            if completed:
                stats.fail(trial, "the run succeeded but the set is the old one")
        else:
            stats.fail(trial, "the set is neither the old nor the new one")
        expected = set(self.inputs) | ({self.manifest} if found else set()) | \
            set(self.shard_names())
        named_left = orphans = 0
        for name in self.leftovers(expected):
            if name.startswith("." + self.manifest) and ".tmp." in name:
                if named:
                    named_left += 1
                else:
                    stats.commit_window += 1  # checked no further: reported apart
            elif name.startswith(self.manifest + ".") and name.endswith(self.shard_suffix):
                orphans += 1  # a shard no manifest names
            else:
                stats.fail(trial, "left %s in the folder" % name)
            os.remove(self.path(name))
        if named_left:
            stats.named_leftovers += named_left
            stats.named_left_trials += 1
        if orphans:
            stats.orphan_shards += orphans
            stats.orphan_trials += 1


def make_catalog(abf, folder, name, versions):
    """A catalog made with abf: `versions` is a list of ("add"|"remove", bytes)."""
    path = os.path.join(folder, name)
    run_to_end([abf, "catalog", "init", "--db", name], folder)
    for operation, data in versions:
        write(os.path.join(folder, "change.bin"), data)
        run_to_end([abf, "catalog", operation, "--db", name, "-f", "bin", "-i", "change.bin"],
                   folder)
    os.remove(os.path.join(folder, "change.bin"))
    # Everything into the database file (no WAL beside it), so a copy of the
    # one file is the whole catalog.
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for suffix in CATALOG_FILES:
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def digests_of(data):
    return [data[i:i + 32] for i in range(0, len(data), 32)]


class CatalogChange(Case):
    """catalog add / catalog remove on a copy of one base catalog."""

    adding = True

    def prepare(self):
        rng = random.Random("catalog inputs")
        members = rng.randbytes(32 * 40_000)
        self.members = digests_of(members)
        self.removed = self.members[:5000]          # version 2 removes these
        templates = os.path.join(self.dir, "..", "templates-" + self.name.replace(" ", "-"))
        os.makedirs(templates)
        self.template = make_catalog(self.abf, templates, "base.db",
                                     [("add", members), ("remove", b"".join(self.removed))])
        self.template_bytes = read(self.template)
        if self.adding:
            # New digests, live ones (unchanged) and removed ones (added again).
            given = digests_of(rng.randbytes(32 * 25_000)) + self.members[10_000:15_000] + \
                self.removed[:2000]
        else:
            # Live ones (closed), removed ones and strangers (unchanged).
            given = self.members[10_000:30_000] + self.removed[2000:5000] + \
                digests_of(rng.randbytes(32 * 3000))
        rng.shuffle(given)
        self.given = given
        write(self.path("change.bin"), b"".join(given))
        operation = "add" if self.adding else "remove"
        self.argv = [self.abf, "catalog", operation, "--db", "catalog.db", "-f", "bin",
                     "-i", "change.bin"]
        self.reset(None)
        self.old_state = self.state()
        run_to_end(self.argv, self.dir)
        self.new_state = self.state()
        self.check_new_against_given()

    def reset(self, rng):
        for suffix in ("",) + CATALOG_FILES:
            if os.path.exists(self.path("catalog.db" + suffix)):
                os.remove(self.path("catalog.db" + suffix))
        write(self.path("catalog.db"), self.template_bytes)

    def state(self):
        """integrity_check, the versions (all but their time) and a hash of every row."""
        db = sqlite3.connect(self.path("catalog.db"))
        try:
            integrity = db.execute("PRAGMA integrity_check").fetchall()
            versions = db.execute("SELECT version, operation, added, removed FROM versions "
                                  "ORDER BY version").fetchall()
            rows = db.execute("SELECT digest, added_version, removed_version FROM artifacts "
                              "ORDER BY digest, added_version").fetchall()
        finally:
            db.close()
        h = hashlib.sha256()
        for digest, added, removed in rows:
            h.update(digest + b"%d:%s;" % (added, b"-" if removed is None else b"%d" % removed))
        return {"integrity": integrity, "versions": versions, "rows": h.hexdigest(),
                "row_count": len(rows)}

    def check_new_against_given(self):
        """The new version is exactly the change the given digests make."""
        db = sqlite3.connect(self.path("catalog.db"))
        try:
            versions = [v for (v,) in db.execute("SELECT version FROM versions ORDER BY 1")]
            assert versions == [0, 1, 2, 3], versions
            added = {d for (d,) in db.execute(
                "SELECT digest FROM artifacts WHERE added_version = 3")}
            closed = {d for (d,) in db.execute(
                "SELECT digest FROM artifacts WHERE removed_version = 3")}
            (count_added, count_removed), = db.execute(
                "SELECT added, removed FROM versions WHERE version = 3").fetchall()
        finally:
            db.close()
        live = set(self.members) - set(self.removed)
        given = set(self.given)
        if self.adding:
            assert added == given - live and not closed, "version 3 is not the add it was given"
            assert count_added == len(added) and count_removed == 0
        else:
            assert closed == given & live and not added, "version 3 is not the remove it was given"
            assert count_removed == len(closed) and count_added == 0

    def check(self, stats, trial, named, completed):
        db_path = self.path("catalog.db")
        unchanged_file = read(db_path) == self.template_bytes
        left = [n for n in self.leftovers({"change.bin", "catalog.db"})
                if n not in ["catalog.db" + s for s in CATALOG_FILES]]
        for name in left:
            stats.fail(trial, "left %s in the folder" % name)
            os.remove(self.path(name))
        # A reader first, as a user would run one after the kill: it must
        # open the catalog as the killed writer left it.
        reader = subprocess.run([self.abf, "catalog", "stats", "--db", "catalog.db", "--json"],
                                cwd=self.dir, capture_output=True, timeout=60)
        if reader.returncode != 0:
            stats.fail(trial, "catalog stats failed after the kill: " +
                       reader.stderr.decode(errors="replace").strip())
            latest_seen = None
        else:
            latest_seen = json.loads(reader.stdout)["latest_version"]
        state = self.state()
        if state["integrity"] != [("ok",)]:
            stats.fail(trial, "integrity_check: %r" % (state["integrity"],))
        versions = [row[0] for row in state["versions"]]
        if versions != list(range(len(versions))):
            stats.fail(trial, "versions are not contiguous: %r" % versions)
        if state == self.new_state:
            stats.new += 1
        elif state == self.old_state:
            stats.old += 1
            if completed:
                stats.fail(trial, "the run succeeded but the catalog has no new version")
            if not unchanged_file:
                # Never seen: the WAL takes every write until a commit.
                stats.fail(trial, "no new version, but the database file changed")
        else:
            stats.fail(trial, "the catalog is neither the old nor the old plus the whole new "
                       "version: versions %r, %d rows" % (versions, state["row_count"]))
        if latest_seen is not None and latest_seen != versions[-1]:
            stats.fail(trial, "catalog stats saw version %r, SQLite %r" % (
                latest_seen, versions[-1]))


class CatalogAdd(CatalogChange):
    name = "catalog add"
    adding = True


class CatalogRemove(CatalogChange):
    name = "catalog remove"
    adding = False


class ReadsCatalog(SnapshotOutput):
    """A command that reads a catalog (which must stay as it is) and writes one file."""

    shared = {}

    def make_catalog(self):
        # One catalog, shared by build --from-catalog and dedup.
        if "path" not in ReadsCatalog.shared:
            rng = random.Random("read catalog")
            members = rng.randbytes(32 * 150_000)
            folder = os.path.join(self.dir, "..", "templates-read")
            os.makedirs(folder)
            ReadsCatalog.shared["path"] = make_catalog(
                self.abf, folder, "catalog.db", [("add", members),
                                                ("remove", members[:32 * 10_000])])
            ReadsCatalog.shared["members"] = members
        shutil.copy(ReadsCatalog.shared["path"], self.path("catalog.db"))

    def leftovers(self, expected):
        sqlite_own = {"catalog.db-wal", "catalog.db-shm"}  # a reader's, in WAL mode
        return [n for n in super().leftovers(expected) if n not in sqlite_own]


class BuildFromCatalog(ReadsCatalog):
    name = "build --from-catalog"
    output = "out.abf"
    inputs = ("catalog.db",)

    def make_inputs(self):
        self.make_catalog()
        self.argv = [self.abf, "build", "--from-catalog", "catalog.db", "-n", "2000000",
                     "-p", "0.01", "-o", self.output]

    def make_old(self):
        run_to_end([self.abf, "build", "--from-catalog", "catalog.db", "--catalog-version",
                    "1", "-n", "2000000", "-p", "0.01", "-o", "old.abf"], self.dir)
        data = read(self.path("old.abf"))
        os.remove(self.path("old.abf"))
        return data


class Dedup(ReadsCatalog):
    name = "dedup"
    output = "new.txt"
    inputs = ("catalog.db", "catalog.abf", "candidates.bin")

    def make_inputs(self):
        self.make_catalog()
        run_to_end([self.abf, "build", "--from-catalog", "catalog.db", "-n", "200000",
                    "-p", "0.01", "-o", "catalog.abf"], self.dir)
        rng = random.Random("dedup candidates")
        members = ReadsCatalog.shared["members"]
        write(self.path("candidates.bin"), rng.randbytes(32 * 80_000) + members[:32 * 20_000])
        self.argv = [self.abf, "dedup", "-s", "catalog.abf", "--db", "catalog.db", "-f", "bin",
                     "-i", "candidates.bin", "-o", self.output]

    def make_old(self):
        return b"".join(b"%064x\n" % i for i in range(1000))

    def check_new(self):
        lines = self.new_bytes.splitlines()
        assert len(lines) == 80_000 + 10_000, len(lines)  # strangers, and the removed members


class IndexFromCatalog(ReadsCatalog):
    name = "index"
    output = "out.abfx"
    inputs = ("catalog.db",)

    def make_inputs(self):
        self.make_catalog()
        self.argv = [self.abf, "index", "--db", "catalog.db", "-o", self.output]

    def make_old(self):
        # The index of version 1 (before the removal): another file.
        run_to_end([self.abf, "index", "--db", "catalog.db", "--version", "1",
                    "-o", "old.abfx"], self.dir)
        data = read(self.path("old.abfx"))
        os.remove(self.path("old.abfx"))
        return data


class IndexSetFromCatalog(BuildSet):
    """index --shards: an ABXS manifest and its ABFX shards, written shards first."""

    name = "index --shards"
    manifest = "out.abxs"
    shard_suffix = ".abfx"
    inputs = ("catalog.db",)

    def prepare(self):
        ReadsCatalog.make_catalog(self)
        self.catalog_hash = sha(read(self.path("catalog.db")))
        self.argv = [self.abf, "index", "--db", "catalog.db", "--shards", "3",
                     "-o", self.manifest]
        # The old set: version 1's (before the removal).
        run_to_end([self.abf, "index", "--db", "catalog.db", "--version", "1", "--shards", "3",
                    "-o", self.manifest], self.dir)
        self.old_files = {n: read(self.path(n)) for n in os.listdir(self.dir)
                          if n.startswith(self.manifest)}
        self.old_set = self.identity()
        self.had_old = True
        self.reset(None)
        run_to_end(self.argv, self.dir)
        self.new_set = self.identity()
        assert self.new_set and self.new_set != self.old_set
        subprocess.run([self.abf, "inspect", self.path(self.manifest)], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)

    def shard_names(self):
        data = read(self.path(self.manifest))
        if data is None or len(data) < 128:
            return []
        count = int.from_bytes(data[8:12], "little")
        names, at = [], 128 + 32 * count
        for i in range(count):
            length = int.from_bytes(data[128 + 32 * i + 24:128 + 32 * i + 28], "little")
            names.append(data[at:at + length].decode())
            at += length
        return names

    def identity(self):
        """The manifest's fields (less the checksums and the build id), its
        entries, and each shard file's bytes (None: no manifest)."""
        data = read(self.path(self.manifest))
        if data is None:
            return None
        count = int.from_bytes(data[8:12], "little")
        fields = data[:72] + data[96:128]
        entries = [data[128 + 32 * i:128 + 32 * i + 24] for i in range(count)]
        shards = [sha(read(self.path(name))) for name in self.shard_names()]
        return (fields, entries, shards)

    def leftovers(self, expected):
        sqlite_own = {"catalog.db-wal", "catalog.db-shm"}  # a reader's, in WAL mode
        return [n for n in super().leftovers(expected) if n not in sqlite_own]

    def check(self, stats, trial, named, completed):
        super().check(stats, trial, named, completed)
        if sha(read(self.path("catalog.db"))) != self.catalog_hash:
            stats.fail(trial, "input catalog.db changed")


CASES = [Build, Merge, CatalogAdd, CatalogRemove, BuildFromCatalog, Dedup, IndexFromCatalog,
         BuildSet, IndexSetFromCatalog]


def run_case(case, trials, seed, named_every, deadline, log):
    stats = Stats(case.name)
    started = time.monotonic()
    case.prepare()
    stats.duration = case.calibrate()
    rng = random.Random("%d:%s" % (seed, case.name))
    for trial in range(trials):
        if time.monotonic() > deadline:
            stats.fail(trial, "the deadline passed: stopped after %d trials" % trial)
            break
        named = named_every > 0 and trial % named_every == named_every - 1
        case.reset(rng)
        delay = rng.uniform(0.0, stats.duration)
        start = time.monotonic()
        process = subprocess.Popen(case.argv, cwd=case.dir, env=case.env(named),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(max(0.0, start + delay - time.monotonic()))
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=120)
        stats.trials += 1
        stats.named += named
        if process.returncode == KILLED:
            stats.killed += 1
            completed = False
        elif process.returncode == 0:
            stats.finished += 1
            completed = True
        else:
            stats.fail(trial, "exit status %d: %s" % (process.returncode,
                                                      err.decode(errors="replace").strip()))
            completed = False
        case.check(stats, trial, named, completed)
    stats.seconds = time.monotonic() - started
    log.write("%-22s %3d trials (%d named) in %5.1f s, uninterrupted %5.1f ms: killed %d, "
              "finished %d; outputs old %d, new %d; named leftovers %d (in %d trials), "
              "commit-window leftovers %d; orphan shards %d (in %d trials); failures %d\n" % (
                  stats.name, stats.trials, stats.named, stats.seconds, stats.duration * 1000,
                  stats.killed, stats.finished, stats.old, stats.new, stats.named_leftovers,
                  stats.named_left_trials, stats.commit_window, stats.orphan_shards,
                  stats.orphan_trials, len(stats.failures)))
    log.flush()
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=100, help="trials per command")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("ABF_KILL_SEED", "14")))
    parser.add_argument("--named-every", type=int, default=3,
                        help="every Nth trial with ABF_NO_O_TMPFILE=1 (0: none)")
    # A bound for a hung run, not a speed asked of the machine: 70 s on a
    # quiet 2-core machine, 403 s on one loaded 8 times over (CTest allows 1800).
    parser.add_argument("--deadline", type=float, default=1700.0,
                        help="seconds for everything (CTest allows 1800)")
    parser.add_argument("--only", action="append", help="run only this command (repeatable)")
    parser.add_argument("--json", help="write the table as JSON to this file")
    args = parser.parse_args()
    abf = abf_binary()
    deadline = time.monotonic() + args.deadline
    root = tempfile.mkdtemp(prefix="abf-kill-harness-")
    print("seed %d, %d trials per command, every %s trial with named temporaries, in %s" % (
        args.seed, args.trials, args.named_every, root), flush=True)
    all_stats = []
    try:
        for case_class in CASES:
            if args.only and case_class.name not in args.only:
                continue
            case = case_class(root, abf)
            all_stats.append(run_case(case, args.trials, args.seed, args.named_every,
                                      deadline, sys.stdout))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ReadsCatalog.shared.clear()
    failures = [f for s in all_stats for f in s.failures]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "commands": [s.row() for s in all_stats]}, f, indent=2)
    for failure in failures[:50]:
        print("FAIL " + failure)
    print("%d trials, %d failures" % (sum(s.trials for s in all_stats), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
