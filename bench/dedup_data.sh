#!/usr/bin/env bash
# The data of bench/dedup_end_to_end.py (docs/performance.md, "Bulk dedup,
# end to end"): in DIR, a SQLite catalog c.db of N random digests (one
# version), its snapshot c.abf at p = 0.01, its exact index c.abfx, and two
# inputs of N binary candidates in random order: c50.bin (half catalog
# members) and c99.bin (1% members, 99% new). Digests come from
# abf_gen_digests (splitmix64 streams: seed 1 the members, seed 2 the rest).
# Each step's wall and CPU time and peak memory go to stderr.
#
#   bench/dedup_data.sh BUILD_DIR N DIR
set -euo pipefail
build=$(cd "$1" && pwd)
n=$2
mkdir -p "$3"
cd "$3"
exec 3>&2
timed() { local name=$1; shift; /usr/bin/time -a -o /dev/fd/3 -f "$name: %e s wall, %U + %S s CPU, %M KiB peak" "$@"; }
"$build/bench/abf_gen_digests" "$n" 1 >members.bin
"$build/bench/abf_gen_digests" "$n" 2 >others.bin
rm -f c.db c.db-wal c.db-shm
"$build/abf" catalog init --db c.db >/dev/null 2>&1
# Added in key order: SQLite appends to its B-tree. In random order a
# catalog of millions outgrows SQLite's page cache inside the one write
# transaction, which then spills pages to the WAL again and again (20,000,000
# random digests: 400 MB of WAL and not done after 7 minutes, against 6
# minutes for the whole sorted add).
/usr/bin/python3 -c 'import numpy as np; d = np.fromfile("members.bin", "V32"); d.sort(); d.tofile("sorted.bin")'
timed "catalog add" "$build/abf" catalog add --db c.db -f bin -i sorted.bin >/dev/null 2>&1
rm sorted.bin
timed "build" "$build/abf" build --from-catalog c.db -n "$n" -p 0.01 -o c.abf >/dev/null 2>&1
timed "index" "$build/abf" index --db c.db -o c.abfx >/dev/null 2>&1
/usr/bin/python3 - "$n" <<'PY'
import sys
import numpy as np
n = int(sys.argv[1])
members = np.memmap("members.bin", np.uint8, "r").reshape(-1, 32)
others = np.memmap("others.bin", np.uint8, "r").reshape(-1, 32)
rng = np.random.default_rng(7)
half = np.concatenate([members[: n // 2], others[: n - n // 2]])
rng.shuffle(half, axis=0)
half.tofile("c50.bin")
few = max(1, n // 100)
ninety_nine = np.concatenate([members[:few], others[: n - few]])
rng.shuffle(ninety_nine, axis=0)
ninety_nine.tofile("c99.bin")
PY
rm members.bin others.bin
