#!/usr/bin/python3
"""Server time of gRPC FindMissingBlobs against the binary HTTP batch, on the
same 1,000-digest requests (docs/performance.md, "abf serve": gRPC).

  server/bench/grpc_vs_http.py BUILD_DIR [REQUESTS] [RUNS]

Builds a 100,000-digest catalog (fpp 0.01) and 64 requests of 1,000
digests, 99% missing, starts one `abf serve` with both fronts, and sends
REQUESTS requests (default 2,000) one at a time on one connection to each
front, in alternating blocks of 250 (both fronts meet the same machine),
RUNS times (default 3). For each it reports the server's own
figures, so the client's speed (Python) does not count:
  - log_us: the median of the access lines' "us" (the handler, from the
    request parsed to the answer written);
  - cpu_us: the server process's CPU time (utime + stime of /proc/PID/stat)
    per request, which also covers what gRPC and httplib do outside the
    handler (HTTP/2 or HTTP/1.1 framing, protobuf parsing, threads);
and the medians over the runs, with the gRPC/HTTP ratio of each, and the
median of the CPU ratios of neighbouring blocks.
"""

import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "serve"))
import serve_support as support  # noqa: E402


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    build = os.path.abspath(sys.argv[1])
    requests_per_run = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    os.environ["ABF_CLI"] = os.path.join(build, "abf")
    support.require("grpc", "grpc_tools", "google.protobuf", "requests")
    import grpc
    import requests

    work = tempfile.mkdtemp(prefix="abf-grpc-vs-http-")
    try:
        pb2, pb2_grpc = support.generate_grpc_modules(work)
        catalog = support.Catalog(work, expected_items=100000, fpp=0.01)
        members = support.digests("member", 100000)
        catalog.add(members)
        catalog.build()
        batches = []
        for b in range(64):
            batch = [members[(b * 1000 + i) * 7 % 100000] if i % 100 == 0
                     else support.digest("absent:%d:%d" % (b, i)) for i in range(1000)]
            batches.append(batch)
        bodies = [b"".join(batch) for batch in batches]
        messages = []
        for batch in batches:
            message = pb2.FindMissingBlobsRequest(instance_name="default")
            for i, d in enumerate(batch):
                message.blob_digests.add(hash=d.hex(), size_bytes=1000 + i)
            messages.append(message)

        server = support.Server("--snapshot", catalog.snapshot, "--db", catalog.db,
                                "--grpc-listen", "127.0.0.1:0")
        pid = server.process.pid
        session = requests.Session()
        url = server.url + "/v1/default/find-missing"
        channel = grpc.insecure_channel(server.grpc)
        stub = pb2_grpc.ContentAddressableStorageStub(channel)

        def http(i):
            response = session.post(url, data=bodies[i % 64],
                                    headers={"Content-Type": "application/octet-stream"})
            assert response.status_code == 200, response.text

        def grpc_call(i):
            stub.FindMissingBlobs(messages[i % 64], timeout=30)

        for i in range(200):  # warm both
            http(i)
            grpc_call(i)
        # Runs of alternating blocks of 250 requests, so that both fronts
        # meet the same machine (other processes come and go on 2 vCPUs);
        # each pair of blocks gives a ratio, and their median is the figure
        # least moved by the machine's load.
        figures = {"http": {"log_us": [], "cpu_us": []}, "grpc": {"log_us": [], "cpu_us": []}}
        pair_ratios = []
        block = 250
        for _ in range(runs):
            cpu = {"http": 0.0, "grpc": 0.0}
            mark = len(server.log_lines())
            for b in range(max(1, requests_per_run // block)):
                pair = {}
                for front, call in (("http", http), ("grpc", grpc_call)):
                    before = cpu_seconds(pid)
                    for i in range(block):
                        call(b * block + i)
                    pair[front] = cpu_seconds(pid) - before
                    cpu[front] += pair[front]
                if pair["http"] > 0:
                    pair_ratios.append(pair["grpc"] / pair["http"])
            time.sleep(0.2)
            lines = server.log_lines()[mark:]
            for front in ("http", "grpc"):
                us = [line["us"] for line in lines if line.get("event") == "request"
                      and line.get("front") == front and line.get("digests") == 1000]
                figures[front]["log_us"].append(statistics.median(us))
                figures[front]["cpu_us"].append(cpu[front] / (b + 1) / block * 1e6)
        channel.close()
        server.stop()
        print("machine: %d CPUs (%s), load %s" % (
            os.cpu_count(), open("/proc/cpuinfo").read().split("model name")[1].split(":")[1]
            .split("\n")[0].strip(), open("/proc/loadavg").read().split()[:3]))
        print("%d runs of %d requests of 1,000 digests (99%% missing) per front" %
              (runs, requests_per_run))
        for front in ("http", "grpc"):
            print("%-5s log_us %s (median %.0f)  cpu_us %s (median %.0f)" % (
                front, [round(x) for x in figures[front]["log_us"]],
                statistics.median(figures[front]["log_us"]),
                [round(x) for x in figures[front]["cpu_us"]],
                statistics.median(figures[front]["cpu_us"])))
        print("cpu_us ratio grpc/http, median of %d pairs of blocks: %.2f" % (
            len(pair_ratios), statistics.median(pair_ratios)))
        for key in ("log_us", "cpu_us"):
            print("ratio grpc/http %s: %.2f" % (key, statistics.median(figures["grpc"][key]) /
                                               statistics.median(figures["http"][key])))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
