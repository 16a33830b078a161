#!/usr/bin/env bash
# bench/request_cost.sh -- CPU instructions zarrd executes per request, in
# user space, for small answers: a load-independent measure of the request
# path's own cost (wrk ratios on a shared 2-core machine move by +-20%).
#
# Command (from the repository root, after `cargo build --release`):
#
#     bench/request_cost.sh                        # the release binary
#     ZARRD=/tmp/zarrd-before bench/request_cost.sh   # another build, to compare
#
# How: zarrd runs under valgrind's callgrind (which counts every instruction
# it executes); one keep-alive client sends N1, then, in a second run, N2
# identical GETs; (instructions(N2) - instructions(N1)) / (N2 - N1) is the
# cost of one request, start-up and shutdown cancelling out. Kernel work
# (the socket and `stat` syscalls) is not counted; it is the same for any
# server. Counts repeat to within a few instructions from run to run.
#
# Cases (the same as store_get.sh's small ones):
#   zarr.json   GET /zarr/data/small/zarr.json  (200, 300-byte document)
#   404         GET /zarr/data/small/c/7/7       (missing chunk)
#   healthz     GET /healthz
#   tile        GET /api/v1/data/data/small?sel=0:8,0:8&format=raw  (one
#               stored chunk, hot in the decoded chunk cache: the slice path)
#   box         GET /api/v1/data/data/small?sel=0:64,0:64&format=raw (all
#               64 chunks of the array, 63 stored and hot, one missing)
#   tile256     GET /api/v1/data/data/tiles?sel=256:512,0:256&format=raw
#               (one stored 256x256 float32 chunk, 256 KiB, hot in the cache;
#               not in the default CASES)
#   tile256u    the same array, sel=128:384,128:384 (four chunks, 256 KiB;
#               not in the default CASES)
#
# Knobs: ZARRD (binary), N1=1000, N2=3000, CASES="json 404 healthz tile box".
# Needs valgrind (apt-get install -y valgrind), curl and python3.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ZARRD=${ZARRD:-${CARGO_TARGET_DIR:-$REPO/target}/release/zarrd}
N1=${N1:-1000}
N2=${N2:-3000}
CASES=${CASES:-"json 404 healthz tile box"}

command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 2; }
[ -x "$ZARRD" ] || { echo "no zarrd binary at $ZARRD (cargo build --release)" >&2; exit 2; }

TMP=$(mktemp -d)
PID=
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

mkdir -p "$TMP/data/small/c/0"
cat >"$TMP/data/small/zarr.json" <<'EOF'
{"zarr_format": 3, "node_type": "array", "shape": [64, 64], "data_type": "uint8", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}}, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0, "codecs": [{"name": "bytes"}]}
EOF
# Every chunk but c/7/7 (the 404 case) is stored.
for i in 0 1 2 3 4 5 6 7; do
  mkdir -p "$TMP/data/small/c/$i"
  for j in 0 1 2 3 4 5 6 7; do
    [ "$i$j" = 77 ] || head -c 64 /dev/urandom >"$TMP/data/small/c/$i/$j"
  done
done

# 512x512 float32 in 256x256 chunks, uncompressed (the hot 256 KiB tile).
mkdir -p "$TMP/data/tiles/c/0" "$TMP/data/tiles/c/1"
cat >"$TMP/data/tiles/zarr.json" <<'EOF'
{"zarr_format": 3, "node_type": "array", "shape": [512, 512], "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [256, 256]}}, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}
EOF
for i in 0 1; do for j in 0 1; do head -c 262144 /dev/urandom >"$TMP/data/tiles/c/$i/$j"; done; done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Instructions executed by a zarrd that served `n` GETs of `path`.
count() {
  local path=$1 n=$2 port out
  port=$(free_port)
  out="$TMP/callgrind.$n"
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$ZARRD" serve --bind "127.0.0.1:$port" --mount "data=file://$TMP/data" >"$TMP/log" 2>&1 &
  PID=$!
  local up=
  for _ in $(seq 150); do
    if curl -s -o /dev/null "http://127.0.0.1:$port/healthz"; then up=1; break; fi
    sleep 0.2
  done
  [ -n "$up" ] || { cat "$TMP/log" >&2; echo "zarrd did not start under valgrind" >&2; exit 1; }
  python3 - "$port" "$path" "$n" <<'PY'
import http.client, sys
port, path, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(n):
    c.request("GET", path)
    r = c.getresponse()
    r.read()
    if r.status not in (200, 404):
        sys.exit(f"GET {path}: status {r.status}")
PY
  kill -INT "$PID"
  wait "$PID" || true
  PID=
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

echo "| case | path | instructions per request |"
echo "|---|---|---:|"
for c in $CASES; do
  case $c in
    json) path=/zarr/data/small/zarr.json ;;
    404) path=/zarr/data/small/c/7/7 ;;
    healthz) path=/healthz ;;
    tile) path='/api/v1/data/data/small?sel=0:8,0:8&format=raw' ;;
    box) path='/api/v1/data/data/small?sel=0:64,0:64&format=raw' ;;
    tile256) path='/api/v1/data/data/tiles?sel=256:512,0:256&format=raw' ;;
    tile256u) path='/api/v1/data/data/tiles?sel=128:384,128:384&format=raw' ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  a=$(count "$path" "$N1")
  b=$(count "$path" "$N2")
  echo "| $c | \`$path\` | $(( (b - a) / (N2 - N1) )) |"
done
echo
echo "zarrd: \`$ZARRD\` (built $(date -u -r "$ZARRD" '+%Y-%m-%d %H:%M UTC')); N1=$N1, N2=$N2"
