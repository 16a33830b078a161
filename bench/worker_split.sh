#!/usr/bin/env bash
# bench/worker_split.sh -- how a burst of keep-alive connections is spread over
# zarrd's workers, and the CPU each server spends per request, for missing
# keys (404): measures that hold on a busy machine, where wrk's requests/s
# swing by 2x from run to run.
#
# Command (from the repository root, after `cargo build --release`):
#
#     bench/worker_split.sh                                   # the release binary
#     BASELINE=/work/wt/zarrd-main bench/worker_split.sh      # and another build, interleaved
#
# What: nginx (static files, no logs) and zarrd (RUST_LOG=warn, default
# configuration) serve one temporary directory; wrk (2 threads, CONNS
# connections, 1 s warmup that checks every status, then SECONDS s) cycles
# through 256 missing chunk keys on each server in turn, ROUNDS times. For
# each run it prints requests/s, p99, and the server's CPU time (user +
# system, from /proc) divided by the requests served; at the end, the CPU
# time each zarrd worker thread (`zarrd-worker-N`) used over all runs: an
# even split means each core served its share of the connections.
#
# Knobs: ZARRD, BASELINE, CONNS=16, SECONDS=3, ROUNDS=3. Needs nginx, wrk,
# curl and python3.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ZARRD=${ZARRD:-${CARGO_TARGET_DIR:-$REPO/target}/release/zarrd}
BASELINE=${BASELINE:-}
CONNS=${CONNS:-16}
SECONDS_=${SECONDS:-3}
ROUNDS=${ROUNDS:-3}

for tool in nginx wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install -y nginx wrk curl python3" >&2; exit 2; }
done
[ -x "$ZARRD" ] || { echo "no zarrd binary at $ZARRD (cargo build --release)" >&2; exit 2; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() {
  for _ in $(seq 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "no answer from $1" >&2; exit 1
}

mkdir -p "$TMP/data/empty" "$TMP/nginx/logs" "$TMP/nginx/tmp"
echo '{"zarr_format": 3, "node_type": "group", "attributes": {}}' >"$TMP/data/zarr.json"
for i in $(seq 0 15); do for j in $(seq 0 15); do echo "/data/empty/c/$i/$j"; done; done >"$TMP/reqs-nginx"
sed 's#^/data/#/zarr/bench/#' "$TMP/reqs-nginx" >"$TMP/reqs-zarrd"

NPORT=$(free_port)
user=""
[ "$(id -u)" = 0 ] && user="user $(id -un);"
cat >"$TMP/nginx/nginx.conf" <<EOF
daemon off; master_process on; worker_processes auto; $user
pid $TMP/nginx/nginx.pid; error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off; log_not_found off; sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_timeout 65; keepalive_requests 1000000; server_tokens off;
  client_body_temp_path $TMP/nginx/tmp/body; proxy_temp_path $TMP/nginx/tmp/proxy;
  fastcgi_temp_path $TMP/nginx/tmp/fastcgi; uwsgi_temp_path $TMP/nginx/tmp/uwsgi; scgi_temp_path $TMP/nginx/tmp/scgi;
  server { listen 127.0.0.1:$NPORT; location /data/ { alias $TMP/data/; } location / { return 404; } }
}
EOF
nginx -p "$TMP/nginx/" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log" >/dev/null 2>&1 &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
wait_up "http://127.0.0.1:$NPORT/data/zarr.json"
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | tr '\n' ' ')

declare -A PORT PID
start_zarrd() {
  local name=$1 bin=$2 port
  port=$(free_port)
  RUST_LOG=warn "$bin" serve --bind "127.0.0.1:$port" --mount "bench=file://$TMP/data" >"$TMP/$name.log" 2>&1 &
  PID[$name]=$!
  PIDS+=("${PID[$name]}")
  PORT[$name]=$port
  wait_up "http://127.0.0.1:$port/healthz"
}
NAMES=(zarrd)
start_zarrd zarrd "$ZARRD"
if [ -n "$BASELINE" ]; then NAMES+=(baseline); start_zarrd baseline "$BASELINE"; fi

ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
hz=$(getconf CLK_TCK)

echo "| round | server | req/s | p99 | CPU µs per request |"
echo "|---:|---|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  for s in nginx "${NAMES[@]}"; do
    if [ "$s" = nginx ]; then
      url="http://127.0.0.1:$NPORT/"; reqs="$TMP/reqs-nginx"; pids=$NGINX_WORKERS
    else
      url="http://127.0.0.1:${PORT[$s]}/"; reqs="$TMP/reqs-zarrd"; pids=${PID[$s]}
    fi
    warm=$(BENCH_REQS=$reqs EXPECT_STATUS=404 BENCH_CHECK=1 wrk -t2 -c"$CONNS" -d1s -s "$HERE/table.lua" "$url")
    echo "$warm" | grep -q "mismatched=0" || { echo "$s: answers other than 404:" >&2; echo "$warm" >&2; exit 1; }
    # shellcheck disable=SC2086
    c0=$(ticks $pids)
    out=$(BENCH_REQS=$reqs EXPECT_STATUS=404 BENCH_CHECK=0 wrk -t2 -c"$CONNS" -d"${SECONDS_}s" --latency -s "$HERE/table.lua" "$url")
    # shellcheck disable=SC2086
    c1=$(ticks $pids)
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    p99=$(echo "$out" | awk '/ 99%/ {print $2}')
    us=$(python3 -c "print(f'{($c1 - $c0) * 1e6 / $hz / $n:.2f}')")
    echo "| $r | $s | $rps | $p99 | $us |"
  done
done
echo
for s in "${NAMES[@]}"; do
  split=""
  for t in /proc/"${PID[$s]}"/task/*; do
    comm=$(cat "$t/comm")
    case $comm in zarrd-worker-*) split="$split $comm=$(awk '{print $14 + $15}' "$t/stat")" ;; esac
  done
  echo "$s: CPU ticks per worker thread over all runs (warmups included):$split"
done
