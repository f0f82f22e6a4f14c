#!/usr/bin/python3
"""Dedup against a plain list of known digests, no catalog: abf beside
`sort -u | comm` and a Python set (docs/performance.md, "Dedup against a
plain list").

    bench/plain_list_dedup.py --dir DIR [--abf build/abf] [--known 5000000]
                              [--candidates 10000000] [--known-share 0.3]
                              [--runs 3] [--json FILE]

Makes, once, in DIR: known.txt (--known random digests, one lowercase hex
line each, as `abf digest | cut -c1-64` prints them) and cand.txt
(--candidates lines: a --known-share of them known digests, the rest new,
1% of the new ones twice, in random order). Seeded (random.Random(37)), so
the same arguments make the same files; the writing is bounded by the
counts (blocks of 65,536 lines). Then times, --runs times, interleaved:

  sort|comm   LC_ALL=C sort -u known.txt > k; LC_ALL=C sort -u cand.txt > c;
              LC_ALL=C comm -13 k c > new        (new digests, sorted)
  python set  set(known lines); each candidate line not in it, first
              occurrence only, in input order
  abf index   abf index -i known.txt -o known.abfx, then
   + dedup    abf dedup --index known.abfx -i cand.txt -o new
  abf + snap  abf build -i known.txt -n N -p 0.01 -o known.abf, abf index
              as above, then abf dedup -s known.abf --index known.abfx

Each "first answer" includes making what it needs from the list (sorting,
the set, the index, the snapshot). The wall time is the median of the runs;
CPU (user + system) and peak memory are of the median run, from wait4.
Every method's new digests must be the same set, or the run fails.
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

BLOCK = 65536


def make_data(directory, known, candidates, share):
    known_path = os.path.join(directory, "known.txt")
    cand_path = os.path.join(directory, "cand.txt")
    stamp = os.path.join(directory, "params.json")
    params = {"known": known, "candidates": candidates, "share": share, "seed": 37}
    try:
        with open(stamp) as f:
            if json.load(f) == params and os.path.exists(cand_path):
                return known_path, cand_path
    except (OSError, ValueError):
        pass
    rng = random.Random(37)
    # The known list in blocks; candidates pick known digests from it by
    # index, so the list is read back once rather than held.
    with open(known_path, "w") as out:
        left = known
        while left:
            n = min(BLOCK, left)
            text = rng.randbytes(32 * n).hex()
            out.write("\n".join(text[i:i + 64] for i in range(0, 64 * n, 64)))
            out.write("\n")
            left -= n
    # Which candidates are known: a random subset of the list's positions,
    # in random order; the rest new (1% of them repeated later).
    n_known = int(candidates * share)
    picks = rng.sample(range(known), min(n_known, known))
    with open(known_path) as f:
        lines = f.read().split("\n")
    chosen = [lines[i] for i in picks]
    del lines
    n_new = candidates - len(chosen)
    n_repeat = n_new // 100
    fresh_text = rng.randbytes(32 * (n_new - n_repeat)).hex()
    fresh = [fresh_text[i:i + 64] for i in range(0, len(fresh_text), 64)]
    del fresh_text
    fresh.extend(rng.choices(fresh, k=n_repeat))
    pool = chosen + fresh
    del chosen, fresh
    rng.shuffle(pool)
    with open(cand_path, "w") as out:
        for i in range(0, len(pool), BLOCK):
            out.write("\n".join(pool[i:i + BLOCK]))
            out.write("\n")
    with open(stamp, "w") as f:
        json.dump(params, f)
    return known_path, cand_path


def timed(argv, **kw):
    """Wall seconds, CPU seconds and peak RSS (KiB) of one command."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit("failed (%d): %s" % (proc.returncode, " ".join(argv)))
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


PYTHON_SET = r"""
import sys
with open(sys.argv[1]) as f:
    known = set(f.read().split())
seen = set()
with open(sys.argv[2]) as f, open(sys.argv[3], "w") as out:
    for line in f:
        d = line.strip()
        if d and d not in known and d not in seen:
            seen.add(d)
            out.write(d + "\n")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--abf", default="build/abf")
    ap.add_argument("--known", type=int, default=5_000_000)
    ap.add_argument("--candidates", type=int, default=10_000_000)
    ap.add_argument("--known-share", type=float, default=0.3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    d = os.path.abspath(args.dir)
    abf = os.path.abspath(args.abf)
    known, cand = make_data(d, args.known, args.candidates, args.known_share)
    p = lambda name: os.path.join(d, name)
    env = dict(os.environ, LC_ALL="C")
    sh = lambda script: ["/bin/sh", "-c", script]
    methods = {
        "sort|comm": [sh("sort -u %s > %s && sort -u %s > %s && comm -13 %s %s > %s" %
                         (known, p("k.sorted"), cand, p("c.sorted"), p("k.sorted"),
                          p("c.sorted"), p("new.comm")))],
        "python set": [["/usr/bin/python3", "-c", PYTHON_SET, known, cand, p("new.py")]],
        "abf index + dedup": [
            [abf, "index", "-i", known, "-o", p("known.abfx")],
            [abf, "dedup", "--index", p("known.abfx"), "-i", cand, "-o", p("new.abf")]],
        "abf build + index + dedup -s": [
            [abf, "build", "-i", known, "-n", str(args.known), "-p", "0.01", "-o", p("known.abf")],
            [abf, "index", "-i", known, "-o", p("known2.abfx")],
            [abf, "dedup", "-s", p("known.abf"), "--index", p("known2.abfx"), "-i", cand, "-o",
             p("new.abfs")]],
    }
    outputs = {"sort|comm": "new.comm", "python set": "new.py", "abf index + dedup": "new.abf",
               "abf build + index + dedup -s": "new.abfs"}
    runs = {name: [] for name in methods}
    for _ in range(args.runs):
        for name, steps in methods.items():
            wall = cpu = 0.0
            peak = 0
            parts = []
            for step in steps:
                w, c, m = timed(step, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
                wall += w
                cpu += c
                peak = max(peak, m)
                parts.append(w)
            runs[name].append({"wall": wall, "cpu": cpu, "peak_kib": peak, "steps": parts})
    sets = {}
    for name, out in outputs.items():
        with open(p(out)) as f:
            sets[name] = set(f.read().split())
    first = next(iter(sets.values()))
    for name, s in sets.items():
        if s != first:
            sys.exit("%s: its new digests differ from sort|comm's" % name)
    print("%d known, %d candidates, %d new digests; %d runs, medians" %
          (args.known, args.candidates, len(first), args.runs))
    print("%-30s %9s %9s %10s  %s" % ("method", "wall s", "cpu s", "peak MiB", "steps (s)"))
    for name, rs in runs.items():
        rs.sort(key=lambda r: r["wall"])
        mid = rs[len(rs) // 2]
        print("%-30s %9.2f %9.2f %10.0f  %s" % (
            name, statistics.median(r["wall"] for r in rs), mid["cpu"], mid["peak_kib"] / 1024,
            " + ".join("%.2f" % s for s in mid["steps"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=2)


if __name__ == "__main__":
    main()
