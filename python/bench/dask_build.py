#!/usr/bin/python3
"""A Dask build of N digests on a 2-worker LocalCluster against `abf build`.

Generates N uniformly random digests (NumPy PCG64, one seed per partition:
SHA-256 outputs are uniform, so random bytes stand in for them), writes
them once to a binary file for `abf build --input-format bin`, and builds:

  abf build    the command on that file, under /usr/bin/time (wall
               seconds, peak RSS);
  abf.dask     abf.dask.build on a LocalCluster of 2 worker processes (1
               thread each; the library's TBB pool uses every core in
               each), every partition generated first and held on a worker,
               alternately on each (timed apart), so only filters move: wall
               seconds of the build, each worker's peak RSS while it runs
               (psutil, every 20 ms), also less what the held partitions
               take, and the bytes Dask moved (each worker's
               incoming transfer log and outgoing byte total: worker to
               worker, and the result to the client).

and checks that both filters are bit for bit the same. Prints JSON.

  PYTHONPATH=build/python /usr/bin/python3 python/bench/dask_build.py \\
      --digests 100000000 --partitions 20 --abf build/abf --workdir /tmp/abf-dask
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import threading
import time

import numpy as np


def partition(index: int, size: int, seed: int) -> np.ndarray:
    """Partition `index`: `size` digests from its own seed (the same on any worker)."""
    return np.random.default_rng([seed, index]).integers(0, 256, (size, 32), dtype=np.uint8)


def sizes(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def write_input(path: pathlib.Path, total: int, parts: int, seed: int) -> None:
    with open(path, "wb") as out:
        for i, size in enumerate(sizes(total, parts)):
            out.write(partition(i, size, seed).tobytes())


def run_cli(abf: str, path: pathlib.Path, output: pathlib.Path, n: int, fpp: float) -> dict:
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", abf, "build", "-n", str(n), "-p", str(fpp),
                           "-f", "bin", "-i", str(path), "-o", str(output)],
                          capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    return {"seconds": seconds, "peak_rss_mib": rss_kib / 1024}


def worker_peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_transfers(dask_worker) -> dict:
    # distributed 2022.12: a running total for what went out (to workers,
    # and to the scheduler for the client's gather), a log for what came in.
    incoming = list(dask_worker.transfer_incoming_log)
    return {"incoming": sum(entry["total"] for entry in incoming),
            "incoming_count": len(incoming),
            "outgoing": dask_worker.transfer_outgoing_bytes_total,
            "outgoing_count": len(dask_worker.transfer_outgoing_log)}


class RssSampler:
    """Samples the RSS of some processes every 20 ms; keeps each one's peak."""

    def __init__(self, pids):
        import psutil

        self.processes = [psutil.Process(pid) for pid in pids]
        self.peaks = [0] * len(pids)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            for i, process in enumerate(self.processes):
                self.peaks[i] = max(self.peaks[i], process.memory_info().rss)
            self.stop.wait(0.02)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def run_dask(total: int, parts: int, seed: int, n: int, fpp: float, split_every: int) -> dict:
    import logging

    import psutil
    from dask import delayed
    from distributed import Client, LocalCluster, wait

    import abf
    import abf.dask

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster)
    try:
        client.wait_for_workers(2, timeout=120)
        pids = list(client.run(os.getpid).values())
        # The partitions first, generated and held on the workers, one after
        # the other on each (as data spread evenly over a cluster would be),
        # so the build's time is the build's own.
        workers = sorted(client.scheduler_info()["workers"])
        start = time.perf_counter()
        futures = [client.submit(partition, i, size, seed, workers=[workers[i % len(workers)]],
                                 pure=True)
                   for i, size in enumerate(sizes(total, parts))]
        wait(futures)
        chunks = [delayed(f) for f in futures]
        generate_seconds = time.perf_counter() - start
        held = [psutil.Process(pid).memory_info().rss / 2**20 for pid in pids]
        with RssSampler(pids) as sampler:
            start = time.perf_counter()
            f = abf.dask.build(chunks, n, fpp, split_every=split_every)
            seconds = time.perf_counter() - start
        transfers = client.run(worker_transfers)
        peaks = [p / 2**20 for p in sampler.peaks]
        return {
            "filter": f,
            "seconds": seconds,
            "generate_seconds": generate_seconds,
            "worker_rss_holding_partitions_mib": held,
            "worker_peak_rss_mib": peaks,
            "worker_peak_over_partitions_mib": [p - h for p, h in zip(peaks, held)],
            "transfers": list(transfers.values()),
            "client_peak_rss_mib": worker_peak_rss_mib(),
        }
    finally:
        client.close()
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--digests", type=int, default=100_000_000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--fpp", type=float, default=0.01)
    parser.add_argument("--split-every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--abf", default="build/abf")
    parser.add_argument("--workdir", default="/tmp/abf-dask-bench")
    parser.add_argument("--keep-input", action="store_true")
    args = parser.parse_args()

    import abf

    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data, output = work / "digests.bin", work / "cli.abf"
    n = args.digests
    load = {"before": os.getloadavg()}
    start = time.perf_counter()
    write_input(data, args.digests, args.partitions, args.seed)
    generate_seconds = time.perf_counter() - start
    try:
        cli = run_cli(args.abf, data, output, n, args.fpp)
        load["after_cli"] = os.getloadavg()
        dask_run = run_dask(args.digests, args.partitions, args.seed, n, args.fpp,
                            args.split_every)
        load["after_dask"] = os.getloadavg()
    finally:
        if not args.keep_input:
            data.unlink(missing_ok=True)
    f = dask_run.pop("filter")
    reference = abf.load(output)
    identical = f == reference
    output.unlink(missing_ok=True)
    moved_in = sum(t["incoming"] for t in dask_run["transfers"])
    moved_out = sum(t["outgoing"] for t in dask_run["transfers"])
    report = {
        "digests": args.digests, "partitions": args.partitions, "fpp": args.fpp,
        "split_every": args.split_every, "bit_count": f.bit_count,
        "filter_mib": f.bit_count / 8 / 2**20, "bit_identical": identical,
        "generate_seconds": generate_seconds,
        "cli": cli, "dask": dask_run,
        "seconds_ratio": dask_run["seconds"] / cli["seconds"],
        "peak_rss_ratio_per_worker": [p / cli["peak_rss_mib"]
                                      for p in dask_run["worker_peak_rss_mib"]],
        "peak_over_partitions_ratio_per_worker": [
            p / cli["peak_rss_mib"] for p in dask_run["worker_peak_over_partitions_mib"]],
        "worker_to_worker_mib": moved_in / 2**20,
        "worker_outgoing_mib": moved_out / 2**20,
        "load_average": load, "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=1))
    if not identical:
        raise SystemExit("the Dask build differs from abf build")


if __name__ == "__main__":
    main()
