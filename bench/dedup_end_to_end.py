#!/usr/bin/env python3
"""Times `abf dedup` end to end beside `abf query` on the same input
(docs/performance.md, "Bulk dedup, end to end").

    bench/dedup_end_to_end.py --data DIR [--abf build/abf] [--base OLD_ABF] [--runs 5]
                              [--index] [--exact-only]

DIR holds c.abf (a snapshot of the catalog c.db) and candidate files
c99.bin / c50.bin (32-byte records); `bench/dedup_data.sh BUILD_DIR N DIR`
makes them. Each command runs --runs times, the
commands interleaved (so a burst of load on a shared machine hits them all),
and the table gives the median wall time and the median CPU time (user +
system, from wait4) of each, and dedup's ratio to `query -o answers.txt`.
Outputs go to a temporary folder beside DIR's files' filesystem (TMPDIR).
--index adds `dedup --index c.abfx` (DIR/c.abfx, from `abf index --db c.db`),
--exact-only adds `dedup --exact-only` (SQLite for every candidate, slow);
every dedup's output of one input must be byte-identical, or the run fails.
--serve adds `abf serve` (one tenant: c.db, c.abf, and c.abfx with --index)
answering the same candidates as 65,536-digest binary batches over one
keep-alive connection (`POST /v1/default/find-missing`): the wall time from
the first request to the last answer, the server's CPU time over the same
span, and the missing digests, which must be dedup's new ones (as a set:
dedup writes each once). --json FILE writes every run's times; --plot FILE
draws the medians (matplotlib, PNG).
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

import numpy as np


SERVE_BATCH = 65536


def process_cpu(pid):
    """User + system seconds of a running process (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """abf serve on 127.0.0.1 (an OS-chosen port), stopped on exit."""

    def __init__(self, abf, db, snapshot, index, workdir):
        argv = [abf, "serve", "--listen", "127.0.0.1:0", "--db", db, "--snapshot", snapshot,
                "--log-level", "warn"]
        if index:
            argv += ["--index", index]
        self.log = open(os.path.join(workdir, "serve.log"), "wb")
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"abf serve did not start: see {self.log.name}")
        host, port = json.loads(line)["http"].rsplit(":", 1)
        self.connection = http.client.HTTPConnection(host, int(port), timeout=600)

    def find_missing(self, candidates):
        """(wall s, server CPU s, the missing digests: distinct, sorted, an
        array of 32-byte items). The client only sends and keeps the answers
        while timed: a set of Python objects made as they arrive cost more
        than the server's work (99 s of wall for 3.3 s of server CPU at
        20,000,000 candidates)."""
        data = open(candidates, "rb").read()
        bodies = []
        cpu_before = process_cpu(self.process.pid)
        start = time.monotonic()
        for offset in range(0, len(data), 32 * SERVE_BATCH):
            self.connection.request("POST", "/v1/default/find-missing",
                                    body=data[offset:offset + 32 * SERVE_BATCH],
                                    headers={"Content-Type": "application/octet-stream"})
            response = self.connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise SystemExit(f"abf serve answered {response.status}: {body[:200]!r}")
            bodies.append(body)
        wall = time.monotonic() - start
        cpu = process_cpu(self.process.pid) - cpu_before
        return wall, cpu, np.unique(np.frombuffer(b"".join(bodies), "V32"))

    def close(self):
        self.connection.close()
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def new_digests(path):
    """dedup's output (hex lines, each digest once), distinct and sorted as
    Server.find_missing returns its answers."""
    text = open(path, "rb").read().replace(b"\n", b"").decode("ascii")
    return np.unique(np.frombuffer(bytes.fromhex(text), "V32"))


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    figure, axes = plt.subplots(1, len(names), figsize=(6.4 * len(names), 4.2), squeeze=False)
    for axis, name in zip(axes[0], names):
        rows = results[name]["commands"]
        labels = list(rows)
        walls = [statistics.median(rows[c]["wall_s"]) for c in labels]
        cpus = [statistics.median(rows[c]["cpu_s"]) for c in labels]
        y = range(len(labels))
        axis.barh([i + 0.2 for i in y], walls, height=0.4, label="wall")
        axis.barh([i - 0.2 for i in y], cpus, height=0.4, label="CPU (user + sys)")
        axis.set_yticks(list(y), labels, fontsize=8)
        axis.invert_yaxis()
        axis.set_xscale("log")
        axis.set_xlabel("seconds (median, log scale)")
        axis.set_title(f"{name}: {results[name]['candidates']:,} candidates", fontsize=10)
        axis.legend(fontsize=8)
    machines = sorted({results[name]["machine"] for name in names})
    figure.suptitle("; ".join(machines) + "; median of " +
                    "/".join(str(results[name]["runs"]) for name in names) +
                    " runs; serve CPU: the server's", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


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
    parser.add_argument("--data", help="the folder of c.db, c.abf, c.abfx, c99.bin, c50.bin")
    parser.add_argument("--replot", nargs="+", metavar="JSON",
                        help="run nothing: draw --plot from these --json files (their inputs "
                        "side by side; a later file's commands join an earlier one's of the "
                        "same input)")
    parser.add_argument("--abf", default="build/abf")
    parser.add_argument("--base", help="another abf binary, timed the same way (before/after)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--inputs", default="c99.bin,c50.bin")
    parser.add_argument("--index", action="store_true", help="also time dedup --index c.abfx")
    parser.add_argument("--exact-only", action="store_true", help="also time dedup --exact-only")
    parser.add_argument("--serve", action="store_true",
                        help="also time abf serve on the same candidates (with c.abfx if --index)")
    parser.add_argument("--only", help="time only the commands whose label matches this regex "
                        "(query -o answers.txt always runs: the ratios' reference)")
    parser.add_argument("--json", help="write every run's times to this file")
    parser.add_argument("--plot", help="draw the medians into this PNG")
    args = parser.parse_args()
    if args.replot:
        if not args.plot:
            parser.error("--replot needs --plot")
        merged = {}
        for path in args.replot:
            for name, result in json.load(open(path)).items():
                if name in merged:
                    merged[name]["commands"].update(result["commands"])
                else:
                    merged[name] = result
        plot(merged, args.plot)
        return
    if not args.data:
        parser.error("--data is required (or --replot)")
    machine = (f"{os.cpu_count()} CPUs, "
               + next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                       if line.startswith("model name")), "unknown CPU")
               + f", load {os.getloadavg()[0]:.1f} at the start")
    results = {}

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
            if args.only:
                commands = [c for c in commands
                            if re.search(args.only, c[0]) or c[0].endswith("query -o answers.txt")]
            times = {label: ([], []) for label, _, _ in commands}
            servers = []
            serve_labels = [label for label in ("serve, 64 Ki batches (SQLite)",
                                                "serve, 64 Ki batches --index")
                            if not args.only or re.search(args.only, label)]
            if args.serve:
                index = os.path.join(args.data, "c.abfx") if args.index else None
                for use_index in ([False, True] if index else [False]):
                    label = "serve, 64 Ki batches" + (" --index" if use_index else " (SQLite)")
                    if label not in serve_labels:
                        continue
                    servers.append((label, Server(args.abf, db, snapshot,
                                                  index if use_index else None, out)))
                    times[label] = ([], [])
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
                if servers:
                    expected = new_digests(outputs[0])
                    for label, server in servers:
                        wall, cpu, missing = server.find_missing(candidates)
                        if not np.array_equal(missing, expected):
                            raise SystemExit(f"{name}: {label} answered {len(missing)} missing "
                                             f"digests, dedup {len(expected)} new ones")
                        times[label][0].append(wall)
                        times[label][1].append(cpu)
            for _, server in servers:
                server.close()
            results[name] = {
                "machine": machine, "runs": args.runs,
                "candidates": os.path.getsize(candidates) // 32,
                "commands": {command: {"wall_s": walls, "cpu_s": cpus}
                             for command, (walls, cpus) in times.items()},
            }
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
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
