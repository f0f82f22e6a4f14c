#!/usr/bin/python3
"""`abf catalog add` beside SQLite's own keyed import of the same digests
(docs/performance.md, "Catalogs at import speed").

    bench/catalog_import.py --dir DIR [--abf build/abf] [--add 2000000]
                            [--base 5000000] [--runs 3] [--old-abf OLD]
                            [--old-lib DIR]

Makes, once, in DIR: add.txt (--add random digests, one lowercase hex line
each) and base.txt (--base others), seeded (random.Random(41)), then two
starting points of each store, copied before every timed run:

  empty     a new catalog (abf catalog init) / a new SQLite database
  base      the same holding base.txt (abf catalog add -i base.txt; sqlite3
            .import of base.txt)

and times, --runs times, interleaved, the import of add.txt into each:

  sqlite3 keyed   sqlite3 DB 'CREATE TABLE IF NOT EXISTS d(h TEXT PRIMARY KEY)
                  WITHOUT ROWID' '.import add.txt d'
  sqlite3 plain   the same into 'CREATE TABLE d(h TEXT)' (no key: appends)
  abf             abf catalog add --db c.db -i add.txt
  abf (old)       the same with --old-abf (another build; --old-lib: a
                  folder put first on LD_LIBRARY_PATH for it)

The median wall time of each (and CPU, user + system, of the median run,
from wait4). Every abf add must report --add digests added.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

BLOCK = 65536


def write_digests(path, count, rng):
    with open(path, "w") as out:
        left = count
        while left:
            n = min(BLOCK, left)
            text = rng.randbytes(32 * n).hex()
            out.write("\n".join(text[i:i + 64] for i in range(0, 64 * n, 64)))
            out.write("\n")
            left -= n


def timed(argv, env=None):
    """Wall and CPU seconds of one command, and its stdout."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("failed (%d): %s" % (code, " ".join(argv)))
    return wall, usage.ru_utime + usage.ru_stime, out.decode()


def remove_db(path):
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--abf", default="build/abf")
    ap.add_argument("--add", type=int, default=2_000_000)
    ap.add_argument("--base", type=int, default=5_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["empty", "base"])
    ap.add_argument("--old-abf")
    ap.add_argument("--old-lib")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    d = os.path.abspath(args.dir)
    p = lambda name: os.path.join(d, name)
    abf = os.path.abspath(args.abf)
    stamp = p("params.json")
    params = {"add": args.add, "base": args.base, "seed": 41}
    fresh = True
    try:
        with open(stamp) as f:
            fresh = json.load(f) != params
    except (OSError, ValueError):
        pass
    starts = ["empty", "base"] if args.only is None else [args.only]
    if fresh:
        rng = random.Random(41)
        write_digests(p("add.txt"), args.add, rng)
        write_digests(p("base.txt"), args.base, rng)
        for name in ("start-empty.db", "start-base.db", "start-empty.sql", "start-base.sql"):
            remove_db(p(name))
        with open(stamp, "w") as f:
            json.dump(params, f)
    keyed = "CREATE TABLE IF NOT EXISTS d(h TEXT PRIMARY KEY) WITHOUT ROWID"
    plain = "CREATE TABLE IF NOT EXISTS d(h TEXT)"
    # The starting points, made once (not timed).
    for start in starts:
        if not os.path.exists(p("start-%s.db" % start)):
            subprocess.run([abf, "catalog", "init", "--db", p("start-%s.db" % start)],
                           check=True, capture_output=True)
            if start == "base":
                subprocess.run([abf, "catalog", "add", "--db", p("start-base.db"), "-i",
                                p("base.txt")], check=True, capture_output=True)
        for kind, sql in (("keyed", keyed), ("plain", plain)):
            path = p("start-%s-%s.sql" % (start, kind))
            if not os.path.exists(path):
                cmds = [sql] + ([".import %s d" % p("base.txt")] if start == "base" else [])
                subprocess.run(["sqlite3", path] + cmds, check=True, capture_output=True)
    results = {}
    for _ in range(args.runs):
        for start in starts:
            names = ["sqlite3 keyed", "sqlite3 plain", "abf catalog add"]
            if args.old_abf:
                names.append("abf catalog add (old)")
            for name in names:
                key = "%s, %s" % (name, start)
                work = p("work.db")
                remove_db(work)
                if name.startswith("sqlite3"):
                    kind = name.split()[1]
                    shutil.copyfile(p("start-%s-%s.sql" % (start, kind)), work)
                    argv = ["sqlite3", work, keyed if kind == "keyed" else plain,
                            ".import %s d" % p("add.txt")]
                else:
                    for suffix in ("", "-wal"):
                        if os.path.exists(p("start-%s.db" % start) + suffix):
                            shutil.copyfile(p("start-%s.db" % start) + suffix, work + suffix)
                    binary = abf
                    env = None
                    if name.endswith("(old)"):
                        binary = os.path.abspath(args.old_abf)
                        if args.old_lib:
                            env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(args.old_lib))
                    argv = [binary, "catalog", "add", "--db", work, "-i", p("add.txt"), "--json"]
                subprocess.run(["sync"], check=True)
                wall, cpu, out = timed(argv, env if name.startswith("abf") else None)
                if name.startswith("abf") and json.loads(out)["added"] != args.add:
                    sys.exit("abf catalog add added %s, not %d" % (json.loads(out)["added"],
                                                                    args.add))
                results.setdefault(key, []).append((wall, cpu))
                remove_db(work)
    print("%d digests added; %d runs, medians" % (args.add, args.runs))
    print("%-28s %9s %9s" % ("import", "wall s", "cpu s"))
    for key, rs in results.items():
        rs.sort()
        print("%-28s %9.2f %9.2f" % (key, statistics.median(w for w, _ in rs),
                                     rs[len(rs) // 2][1]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
