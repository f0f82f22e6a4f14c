#!/usr/bin/python3
"""The timing attack of issue 33 on a keyed tenant: can a client tell, from
the response time of its own HEAD requests for missing digests, which ones
the keyed filter answers `maybe` (a catalog lookup) and which `absent`?
(docs/serve.md, "Keyed tenants and response time").

  ABF_CLI=build/abf server/bench/keyed_timing.py [ROUNDS] [PER_CLASS] [head|pair]

One keyed tenant (2,000 members, 5,000 expected, fpp 0.3: about 6% of other
digests are false positives) behind a token, served on 127.0.0.1. PER_CLASS
(default 60) missing digests the filter answers maybe and as many it
answers absent (the raw answers from `abf query --key-file`, which only the
host can run) are each asked ROUNDS times (default 200), every round in a
new random order, on one keep-alive connection; each HEAD is sent as
prepared bytes and timed from the send to the end of the answer's headers
(time.perf_counter_ns), so the client adds little of its own. `pair`
(default `head`) sends instead a binary find-missing of two digests, the
probed one and a member (always a lookup): the batch form, which keeps the
filter's savings, so its time still differs by one lookup.

Reported: the median time of each class, and for n requests a digest (1, 2,
5, 10, 20, 40, ... ROUNDS) the share of the 2 x PER_CLASS digests an
attacker classifies right, taking each digest's median of its first n
times and splitting them in two where the spread within the two groups
is least (two-means; the attacker knows neither class's size nor its
time). Chance
is 50%; the attack "works at n" when it is right for at least 95%.
Bounded: 2 x PER_CLASS x ROUNDS requests (24,000 by default, a few seconds).
"""

import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "serve"))
import serve_support as support  # noqa: E402

TOKEN = "t" * 32


def raw_answers(catalog, items, key_file):
    path = os.path.join(catalog.directory, "probe.txt")
    with open(path, "w") as out:
        out.write("".join(d.hex() + "\n" for d in items))
    result = support.run_abf("query", "-s", catalog.snapshot, "-i", path, "--key-file", key_file)
    answers = {}
    for line in result.stdout.decode().splitlines():
        digest_hex, _, answer = line.partition("\t")
        answers[bytes.fromhex(digest_hex)] = answer
    return [answers[d] for d in items]


def head_times(address, digests, rounds, seed, mode="head", member=None):
    host, port = address.rsplit(":", 1)
    connection = socket.create_connection((host, int(port)))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode == "head":
        requests = {d: ("HEAD /v1/a/blobs/sha256:%s HTTP/1.1\r\nHost: x\r\n"
                        "Authorization: Bearer %s\r\n\r\n" % (d.hex(), TOKEN)).encode()
                    for d in digests}
    else:
        requests = {d: ("POST /v1/a/find-missing HTTP/1.1\r\nHost: x\r\n"
                        "Authorization: Bearer %s\r\n"
                        "Content-Type: application/octet-stream\r\n"
                        "Content-Length: 64\r\n\r\n" % TOKEN).encode() + d + member
                    for d in digests}
    expected = b"HTTP/1.1 404" if mode == "head" else b"HTTP/1.1 200"
    body = 0 if mode == "head" else 32
    times = {d: [] for d in digests}
    rng = random.Random(seed)
    order = list(digests)
    for _ in range(rounds):
        rng.shuffle(order)
        for d in order:
            start = time.perf_counter_ns()
            connection.sendall(requests[d])
            data = b""
            while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < body:
                chunk = connection.recv(4096)
                if not chunk:
                    raise RuntimeError("the server closed the connection")
                data += chunk
            times[d].append(time.perf_counter_ns() - start)
            if not data.startswith(expected):
                raise RuntimeError("expected 404: %r" % data[:80])
    connection.close()
    return times


def classify(medians):
    """Two groups of the sorted values, split where the spread within them
    is least (two-means, Otsu's threshold); the slower group is guessed
    `maybe`."""
    ordered = sorted(medians.items(), key=lambda item: item[1])
    values = [v for _, v in ordered]

    def spread(group):
        mean = sum(group) / len(group)
        return sum((v - mean) ** 2 for v in group)

    cut = min(range(1, len(values)), key=lambda c: spread(values[:c]) + spread(values[c:]))
    return {d: ("maybe" if i >= cut else "absent") for i, (d, _) in enumerate(ordered)}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    per_class = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    mode = sys.argv[3] if len(sys.argv) > 3 else "head"
    directory = tempfile.mkdtemp(prefix="abf-keyed-timing-")
    try:
        key = os.path.join(directory, "a.key")
        support.run_abf("key", "generate", "-o", key)
        catalog = support.Catalog(directory, "a", expected_items=5000, fpp=0.3, key_file=key)
        members = support.digests("member", 2000)
        catalog.add(members)
        catalog.build()
        candidates = support.digests("probe", 4000)
        answers = raw_answers(catalog, candidates, key)
        maybe = [d for d, a in zip(candidates, answers) if a == "maybe"][:per_class]
        absent = [d for d, a in zip(candidates, answers) if a == "absent"][:per_class]
        if len(maybe) < per_class:
            raise RuntimeError("only %d maybes among the candidates" % len(maybe))
        support.write_private(os.path.join(directory, "tokens"), TOKEN + " a\n")
        server = support.Server("--snapshot", catalog.snapshot, "--db", catalog.db,
                                "--key-file", key, "--tenant", "a",
                                "--token-file", os.path.join(directory, "tokens"),
                                "--log-level", "warn")
        try:
            head_times(server.http, maybe[:5] + absent[:5], 20, 0, mode, members[0])  # warm up
            times = head_times(server.http, maybe + absent, rounds, 1, mode, members[0])
        finally:
            server.stop()
        truth = {d: "maybe" for d in maybe}
        truth.update({d: "absent" for d in absent})
        for name, group in (("maybe", maybe), ("absent", absent)):
            every = [t for d in group for t in times[d]]
            print("%-6s median %.1f us (%d requests)" % (
                name, statistics.median(every) / 1000, len(every)))
        n = 1
        steps = []
        while n < rounds:
            steps.append(n)
            n = n * 2 if n >= 10 else {1: 2, 2: 5, 5: 10}[n]
        steps.append(rounds)
        works_at = None
        for n in steps:
            medians = {d: statistics.median(times[d][:n]) for d in truth}
            guess = classify(medians)
            right = sum(guess[d] == truth[d] for d in truth)
            share = right / len(truth)
            if works_at is None and share >= 0.95:
                works_at = n
            print("n=%-4d requests a digest: %3d of %d classified right (%.0f%%)" % (
                n, right, len(truth), 100 * share))
        print("the attack works (>= 95%% right) at n = %s" % (works_at or "never within %d" %
                                                               rounds))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
