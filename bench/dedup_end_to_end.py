#!/usr/bin/env python3
"""Times `abf dedup` end to end beside `abf query` on the same input
(docs/performance.md, "Bulk dedup, end to end").

    bench/dedup_end_to_end.py --data DIR [--abf build/abf] [--base OLD_ABF] [--runs 5]
                              [--index] [--exact-only]

DIR holds c.abf (a snapshot of the catalog c.db) and candidate files
c99.bin / c50.bin (32-byte records). Each command runs --runs times, the
commands interleaved (so a burst of load on a shared machine hits them all),
and the table gives the median wall time and the median CPU time (user +
system, from wait4) of each, and dedup's ratio to `query -o answers.txt`.
Outputs go to a temporary folder beside DIR's files' filesystem (TMPDIR).
--index adds `dedup --index c.abfx` (DIR/c.abfx, from `abf index --db c.db`),
--exact-only adds `dedup --exact-only` (SQLite for every candidate, slow);
every dedup's output of one input must be byte-identical, or the run fails.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time


def timed(argv, stdout):
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {process.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--abf", default="build/abf")
    parser.add_argument("--base", help="another abf binary, timed the same way (before/after)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--inputs", default="c99.bin,c50.bin")
    parser.add_argument("--index", action="store_true", help="also time dedup --index c.abfx")
    parser.add_argument("--exact-only", action="store_true", help="also time dedup --exact-only")
    args = parser.parse_args()

    binaries = [("", args.abf)] + ([("base ", args.base)] if args.base else [])
    with tempfile.TemporaryDirectory(prefix="abf-e2e-") as out:
        for name in args.inputs.split(","):
            candidates = os.path.join(args.data, name)
            snapshot = os.path.join(args.data, "c.abf")
            db = os.path.join(args.data, "c.db")
            commands = []
            for label, abf in binaries:
                commands += [
                    (f"{label}query --summary",
                     [abf, "query", "-s", snapshot, "-f", "bin", "-i", candidates, "--summary"], None),
                    (f"{label}query -o answers.txt",
                     [abf, "query", "-s", snapshot, "-f", "bin", "-i", candidates,
                      "-o", os.path.join(out, "answers.txt")], None),
                    (f"{label}dedup -o new.txt",
                     [abf, "dedup", "-s", snapshot, "--db", db, "-f", "bin", "-i", candidates,
                      "-o", os.path.join(out, "new.txt")], None),
                    (f"{label}dedup > new.txt (staged stdout)",
                     [abf, "dedup", "-s", snapshot, "--db", db, "-f", "bin", "-i", candidates],
                     os.path.join(out, "stdout.txt")),
                ]
                if args.index:
                    commands.append(
                        (f"{label}dedup --index -o new.txt",
                         [abf, "dedup", "-s", snapshot, "--index",
                          os.path.join(args.data, "c.abfx"), "--db", db, "-f", "bin", "-i",
                          candidates, "-o", os.path.join(out, "new-index.txt")], None))
                if args.exact_only:
                    commands.append(
                        (f"{label}dedup --exact-only -o new.txt",
                         [abf, "dedup", "-s", snapshot, "--exact-only", "--db", db, "-f", "bin",
                          "-i", candidates, "-o", os.path.join(out, "new-exact.txt")], None))
            times = {label: ([], []) for label, _, _ in commands}
            for _ in range(args.runs):
                for label, argv, stdout_path in commands:
                    if stdout_path:
                        with open(stdout_path, "wb") as stdout:
                            wall, cpu = timed(argv, stdout)
                    else:
                        wall, cpu = timed(argv, subprocess.DEVNULL)
                    times[label][0].append(wall)
                    times[label][1].append(cpu)
                outputs = [os.path.join(out, f) for f in
                           ("new.txt", "stdout.txt", "new-index.txt", "new-exact.txt")
                           if os.path.exists(os.path.join(out, f))]
                contents = {open(f, "rb").read() for f in outputs}
                if len(contents) != 1:
                    raise SystemExit(f"{name}: the dedup outputs differ: {outputs}")
            print(f"\n{name}: median of {args.runs} runs")
            print(f"| command | wall s | CPU s (user+sys) | wall / query -o | CPU / query -o |")
            print("|---|---|---|---|---|")
            for label, _ in binaries:
                reference = times[f"{label}query -o answers.txt"]
                ref_wall = statistics.median(reference[0])
                ref_cpu = statistics.median(reference[1])
                for command, (walls, cpus) in times.items():
                    if not command.startswith(label) or (not label and command.startswith("base ")):
                        continue
                    wall = statistics.median(walls)
                    cpu = statistics.median(cpus)
                    print(f"| {command} | {wall:.3f} | {cpu:.3f} | {wall / ref_wall:.2f}x | "
                          f"{cpu / ref_cpu:.2f}x |")


if __name__ == "__main__":
    main()
