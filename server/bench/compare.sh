#!/usr/bin/env bash
# Two builds of `abf serve` side by side (a change's before and after), on
# loopback, alternated in one run so that a loaded machine's drift falls on
# both alike: 65,536-digest binary find-missing batches at 99% and at 50%
# missing (the batches of measure.sh), one connection, abf_serve_load.
# Prints each build's median of ROUNDS runs of SECONDS seconds.
#
#   server/bench/compare.sh BEFORE_ABF AFTER_ABF ABF_SERVE_LOAD [ROUNDS] [SECONDS]
set -euo pipefail
before=$(realpath "$1")
after=$(realpath "$2")
load=$(realpath "$3")
rounds=${4:-5}
seconds=${5:-3}
work=$(mktemp -d /tmp/abf-serve-compare-XXXXXX)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - <<'EOF'
import hashlib
with open("members.txt", "w") as out:
    out.write("".join(hashlib.sha256(b"member:%d" % i).hexdigest() + "\n" for i in range(1000000)))
def batch(name, member_every):
    digests = []
    for i in range(65536):
        label = b"member:%d" % (i * 7919 % 1000000) if i % member_every == 0 else b"candidate:%d" % i
        digests.append(hashlib.sha256(label).digest())
    open(name, "wb").write(b"".join(digests))
batch("batch99.bin", 100)
batch("batch50.bin", 2)
EOF
"$before" catalog init --db c.db >/dev/null
"$before" catalog add --db c.db --input members.txt >/dev/null
"$before" build --from-catalog c.db --expected-items 1000000 --fpp 0.01 --output c.abf >/dev/null

start_server() {
  rm -f ready.txt
  "$1" serve --listen 127.0.0.1:0 --snapshot c.abf --db c.db --log-level warn >ready.txt 2>server.log &
  server_pid=$!
  for _ in $(seq 1 400); do
    [[ -s ready.txt ]] && break
    sleep 0.05
  done
  [[ -s ready.txt ]] || { echo "abf serve did not start:" >&2; cat server.log >&2; exit 1; }
  address=$(/usr/bin/python3 -c "import json; print(json.load(open('ready.txt'))['http'])")
}
stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=""
}
rate() {
  "$load" batch "$address" /v1/default/find-missing "$1" 1 "$seconds" |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['digests_per_second'])"
}
declare -A rates
for round in $(seq 1 "$rounds"); do
  for which in before after; do
    binary=$before
    [[ $which == after ]] && binary=$after
    start_server "$binary"
    rates[$which,99]+="$(rate batch99.bin) "
    rates[$which,50]+="$(rate batch50.bin) "
    stop_server
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for missing in 99 50; do
  b=$(echo "${rates[before,$missing]}" | median)
  a=$(echo "${rates[after,$missing]}" | median)
  awk -v m="$missing" -v b="$b" -v a="$a" -v r="$rounds" -v s="$seconds" 'BEGIN {
    printf "  %d%% missing: before %.2f M digests/s, after %.2f M digests/s (after/before %.2f; median of %d x %ds)\n",
           m, b / 1e6, a / 1e6, a / b, r, s }'
  echo "    runs before: ${rates[before,$missing]}"
  echo "    runs after:  ${rates[after,$missing]}"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
