#!/usr/bin/python3
"""Python Filter.query against the library's own batch query, same process.

For each filter size (the scenarios of `abf bench`: l2, llc, dram; p = 0.01,
min(n, 4 Mi) members inserted), times calls of 1 Mi absent digests:
  cxx       the C++ batch query (abf._abf._bench_query: Filter::query on
            the same array, answers allocated once, std::chrono per call)
  py        f.query(digests): the binding, a new answers array per call
  py_out    f.query(digests, out=answers): the binding, answers reused
interleaved, call after call, so a burst of load hits all three alike, and
prints medians and ratio = cxx / py (1.0: no overhead; the target is >= 0.9)
three ways: of the medians, the median of back-to-back pairs, and of the
best calls; and the binding's fixed cost per call (one digest, Python less
C++, in microseconds).

  PYTHONPATH=build/python /usr/bin/python3 python/bench/query_ratio.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

import abf
from abf import _abf

SCENARIOS = {"l2": 100_000, "llc": 10_000_000, "dram": 100_000_000}


def median_ms(samples):
    return statistics.median(samples) * 1e3


def run(scenario: str, n: int, batch: int, repeats: int, backend: str) -> dict:
    rng = np.random.default_rng(7)
    members = rng.integers(0, 256, (min(n, 4 << 20), 32), dtype=np.uint8)
    f = abf.build(members, n, 0.01)
    del members
    probes = rng.integers(0, 256, (batch, 32), dtype=np.uint8)
    out = np.empty(batch, bool)
    cxx, py, py_out = [], [], []
    for _ in range(2):  # warm-up: pages, caches, the engine's scratch
        f.query(probes, backend=backend)
        _abf._bench_query(f, probes, 1, backend)
    for _ in range(repeats):
        cxx += _abf._bench_query(f, probes, 1, backend)
        start = time.perf_counter()
        f.query(probes, backend=backend)
        py.append(time.perf_counter() - start)
        start = time.perf_counter()
        f.query(probes, out=out, backend=backend)
        py_out.append(time.perf_counter() - start)
    assert np.array_equal(f.query(probes), out)
    # The binding's fixed cost per call: one digest, Python against C++.
    one = probes[:1]
    tiny_py, tiny_cxx = [], []
    for _ in range(200):
        start = time.perf_counter()
        f.query(one, backend=backend)
        tiny_py.append(time.perf_counter() - start)
        tiny_cxx += _abf._bench_query(f, one, 1, backend)
    paired = [c / p for c, p in zip(cxx, py)]
    return {
        "scenario": scenario, "n": n, "bit_count": f.bit_count, "batch": batch,
        "backend": backend, "repeats": repeats,
        "cxx_ms": median_ms(cxx), "py_ms": median_ms(py), "py_out_ms": median_ms(py_out),
        "ratio": statistics.median(cxx) / statistics.median(py),
        "ratio_out": statistics.median(cxx) / statistics.median(py_out),
        "ratio_paired": statistics.median(paired),
        "ratio_best": min(cxx) / min(py),
        "call_overhead_us": (statistics.median(tiny_py) - statistics.median(tiny_cxx)) * 1e6,
        "ns_per_digest_py": statistics.median(py) / batch * 1e9,
        "maybe_fraction": float(out.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=list(SCENARIOS), action="append")
    parser.add_argument("--batch", type=int, default=1 << 20)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = [run(s, SCENARIOS[s], args.batch, args.repeats, args.backend)
            for s in (args.scenario or list(SCENARIOS))]
    meta = {"simd_target": abf.simd_target(), "cpus": os.cpu_count(),
            "load_before": load_before, "load_after": os.getloadavg()}
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=1))
        return
    print(f"SIMD target {meta['simd_target']}, {meta['cpus']} CPUs, load average "
          f"{load_before[0]:.2f} before, {meta['load_after'][0]:.2f} after")
    print("medians of each; C++/py: of the medians, of back-to-back pairs, of the best calls")
    print(f"{'scenario':8} {'m':>11} {'batch':>8} {'C++ ms':>8} {'py ms':>8} {'py out ms':>9} "
          f"{'C++/py':>7} {'out':>6} {'paired':>7} {'best':>6} {'call us':>8}")
    for r in rows:
        print(f"{r['scenario']:8} {r['bit_count']:>11} {r['batch']:>8} {r['cxx_ms']:8.2f} "
              f"{r['py_ms']:8.2f} {r['py_out_ms']:9.2f} {r['ratio']:7.3f} {r['ratio_out']:6.3f} "
              f"{r['ratio_paired']:7.3f} {r['ratio_best']:6.3f} {r['call_overhead_us']:8.2f}")


if __name__ == "__main__":
    main()
