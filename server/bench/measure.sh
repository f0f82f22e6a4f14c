#!/usr/bin/env bash
# The figures of docs/serve.md and docs/performance.md ("abf serve"), on
# loopback, with abf_serve_load (server/bench/serve_load.cpp) and wrk as clients:
#   1. batch throughput: 64 Ki-digest binary batches, 99% missing, against the
#      in-process ArtifactExistenceService::exists_batch on the same catalog,
#      snapshot and batch in the same run (abf_serve_inprocess);
#   1b. the same batches half present, through SQLite and through an exact index
#      (--index, abf index) answering the filter's maybes;
#   2. single-blob HEAD (and GET) with keep-alive at 1, 16 and 256 connections;
#   3. memory per tenant and per connection (RSS from /proc).
# Every throughput figure is the median of RUNS runs of SECONDS seconds.
#
#   server/bench/measure.sh BUILD_DIR [RUNS] [SECONDS]
set -euo pipefail
build=$(cd "$1" && pwd)
runs=${2:-3}
seconds=${3:-5}
abf=$build/abf
inprocess=$build/server/abf_serve_inprocess
load=$build/server/abf_serve_load
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/abf-serve-measure-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"

# A catalog of 1,000,000 digests SHA-256("member:<i>"), its snapshot at fpp
# 0.01, and one batch of 65,536: every 100th a member, the rest new.
/usr/bin/python3 - <<'EOF'
import hashlib
with open("members.txt", "w") as out:
    out.write("".join(hashlib.sha256(b"member:%d" % i).hexdigest() + "\n" for i in range(1000000)))
batch = []
for i in range(65536):
    label = b"member:%d" % (i * 7919 % 1000000) if i % 100 == 0 else b"candidate:%d" % i
    batch.append(hashlib.sha256(label).digest())
open("batch.bin", "wb").write(b"".join(batch))
# The same size of batch with every other digest a member (backups, pushes).
half = [hashlib.sha256(b"member:%d" % (i * 7919 % 1000000) if i % 2 == 0 else b"candidate:%d" % i).digest()
        for i in range(65536)]
open("batch50.bin", "wb").write(b"".join(half))
# 1,000 blob paths for HEAD, 99% missing.
with open("paths.txt", "w") as out:
    for i in range(1000):
        label = b"member:%d" % i if i % 100 == 0 else b"absent:%d" % i
        out.write("/v1/default/blobs/sha256:%s\n" % hashlib.sha256(label).hexdigest())
EOF
"$abf" catalog init --db c.db >/dev/null
"$abf" catalog add --db c.db --input members.txt >/dev/null
"$abf" build --from-catalog c.db --expected-items 1000000 --fpp 0.01 --output c.abf >/dev/null
"$abf" index --db c.db --output c.abfx 2>/dev/null

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

# Starts abf serve with "$@"; sets server_pid and server_url.
start_server() {
  rm -f ready.txt  # a stale one from the last server would be read before the new one is written
  local listen=(--listen 127.0.0.1:0)
  [[ ${1:-} == --config ]] && listen=()  # the config file names its own address
  "$abf" serve "${listen[@]}" "$@" >ready.txt 2>server.log &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 1 200); do
    [[ -s ready.txt ]] && break
    sleep 0.05
  done
  if [[ ! -s ready.txt ]]; then
    echo "abf serve did not start:" >&2
    cat server.log >&2
    exit 1
  fi
  server_address=$(/usr/bin/python3 -c "import json; print(json.load(open('ready.txt'))['http'])")
  server_url=http://$server_address
}
stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cat >batch.lua <<'EOF'
local f = io.open("batch.bin", "rb")
wrk.method = "POST"
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
EOF
cat >get.lua <<'EOF'
local paths = {}
for line in io.lines("paths.txt") do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
EOF

echo
echo "== batch throughput: 65,536-digest binary batches, 99% missing (median of $runs x ${seconds}s;"
echo "   each run: the load client, wrk, then the in-process baseline, one after the other)"
start_server --snapshot c.abf --db c.db --http-threads 300
json_field() { /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
for connections in 1 2 4; do
  client=() wrk_rates=() local_rates=()
  threads=$((connections < 2 ? 1 : 2))
  for _ in $(seq 1 "$runs"); do
    client+=("$("$load" batch "$server_address" /v1/default/find-missing batch.bin "$connections" "$seconds" |
               json_field digests_per_second)")
    rps=$(wrk -t1 -c"$connections" -d"${seconds}s" -s batch.lua "$server_url/v1/default/find-missing" |
          awk '/Requests\/sec/ {print $2}')
    wrk_rates+=("$(awk -v r="$rps" 'BEGIN {printf "%.0f", r * 65536}')")
    local_rates+=("$("$inprocess" c.db c.abf batch.bin "$seconds" "$threads" | json_field digests_per_second)")
  done
  c=$(printf '%s\n' "${client[@]}" | median)
  w=$(printf '%s\n' "${wrk_rates[@]}" | median)
  l=$(printf '%s\n' "${local_rates[@]}" | median)
  awk -v n="$connections" -v c="$c" -v w="$w" -v t="$threads" -v l="$l" 'BEGIN {
    printf "  %d connection(s): abf_serve_load %.2f M digests/s (ratio %.2f), wrk %.2f M/s (ratio %.2f); in-process exists_batch, %d thread(s): %.2f M/s\n",
           n, c / 1e6, c / l, w / 1e6, w / l, t, l / 1e6 }'
done
echo "  server RSS after the batches: $(rss_kib "$server_pid") KiB"
stop_server

echo
echo "== batch throughput, half present: 65,536-digest binary batches, every other one a member"
echo "   (abf_serve_load, median of $runs x ${seconds}s), the maybes answered by SQLite or by the index"
for store in sqlite index; do
  if [[ $store == index ]]; then
    start_server --snapshot c.abf --db c.db --http-threads 300 --index c.abfx
  else
    start_server --snapshot c.abf --db c.db --http-threads 300
  fi
  for connections in 1 2 4; do
    rates=()
    for _ in $(seq 1 "$runs"); do
      rates+=("$("$load" batch "$server_address" /v1/default/find-missing batch50.bin "$connections" "$seconds" |
                json_field digests_per_second)")
    done
    r=$(printf '%s\n' "${rates[@]}" | median)
    awk -v s="$store" -v n="$connections" -v r="$r" 'BEGIN {
      printf "  %s, %d connection(s): %.2f M digests/s\n", s, n, r / 1e6 }'
  done
  stop_server
done

echo
echo "== single blob, keep-alive, 99% missing (median of $runs x ${seconds}s): HEAD with"
echo "   abf_serve_load, GET with wrk -t2 (wrk 4.1 waits for a body after a HEAD answer's Content-Length)"
for level in info warn; do
  # 256 connections from one address: above the default cap of 128 a client.
  cat >serve-$level.json <<EOF
{"listen": "127.0.0.1:0", "http_threads": 300, "log_level": "$level",
 "tenants": [{"name": "default", "snapshot": "c.abf", "db": "c.db"}],
 "limits": {"max_connections_per_client": 512}}
EOF
  start_server --config "serve-$level.json"
  for connections in 1 16 256; do
    rows=()
    for _ in $(seq 1 "$runs"); do
      rows+=("$("$load" head "$server_address" paths.txt "$connections" "$seconds" |
               /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["requests_per_second"], r["p50_us"], r["p99_us"])')")
    done
    head_row=$(printf '%s\n' "${rows[@]}" | sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
    rows=()
    threads=$((connections < 2 ? 1 : 2))
    for _ in $(seq 1 "$runs"); do
      rows+=("$(wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency -s get.lua "$server_url" |
               awk '/Requests\/sec/ {r=$2} / 50%/ {p50=$2} / 99%/ {p99=$2} END {print r, p50, p99}')")
    done
    get_row=$(printf '%s\n' "${rows[@]}" | sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
    echo "$head_row $get_row" | awk -v c="$connections" -v l="$level" '{
      printf "  log %s, %3d connection(s): HEAD %.0f requests/s, p50 %d us, p99 %d us | GET (wrk) %.0f requests/s, p50 %s, p99 %s\n",
             l, c, $1, $2, $3, $4, $5, $6}'
  done
  stop_server
done

echo
echo "== memory (RSS)"
start_server --snapshot c.abf --db c.db --http-threads 300 --log-level warn
base=$(rss_kib "$server_pid")
# 1 batch to warm the catalog's page cache and the filter.
curl -s -o /dev/null -H 'Content-Type: application/octet-stream' --data-binary @batch.bin \
  "$server_url/v1/default/find-missing"
warm=$(rss_kib "$server_pid")
/usr/bin/python3 - "$server_url" "$server_pid" <<'EOF'
import socket, sys, time
url, pid = sys.argv[1], sys.argv[2]
host, port = url[len("http://"):].rsplit(":", 1)
def rss():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
before = rss()
socks = []
for _ in range(256):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    s.recv(4096)
    socks.append(s)
time.sleep(0.5)
after = rss()
print("  256 open keep-alive connections: +%d KiB (%.1f KiB a connection)" % (after - before, (after - before) / 256.0))
for s in socks:
    s.close()
EOF
echo "  one tenant (1,000,000-digest catalog, 1.2 MB snapshot): $base KiB at start, $warm KiB after one batch"
stop_server
for tenants in 1 4; do
  /usr/bin/python3 - "$tenants" <<'EOF'
import json, shutil, sys
n = int(sys.argv[1])
tenants = []
for i in range(n):
    shutil.copy("c.abf", "t%d.abf" % i)
    tenants.append({"name": "t%d" % i, "snapshot": "t%d.abf" % i, "db": "c.db"})
json.dump({"tenants": tenants, "http_threads": 300, "log_level": "warn"}, open("serve.json", "w"))
EOF
  start_server --config serve.json
  for i in $(seq 0 $((tenants - 1))); do
    curl -s -o /dev/null -H 'Content-Type: application/octet-stream' --data-binary @batch.bin \
      "$server_url/v1/t$i/find-missing"
  done
  echo "  $tenants tenant(s), each asked one batch: $(rss_kib "$server_pid") KiB"
  stop_server
done
