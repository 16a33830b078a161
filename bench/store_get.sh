#!/usr/bin/env bash
# bench/store_get.sh -- store-protocol GET throughput: zarrd vs nginx.
#
# Command (from the repository root, after `cargo build --release`):
#
#     bench/store_get.sh                     # 3 rounds of 5 s runs, ~9 min
#     ROUNDS=5 DURATION=10 OUT=/tmp/store_get.md bench/store_get.sh
#
# What it measures
#   Plain key GETs on the store protocol (GET /zarr/data/<key>) served by the
#   release zarrd, against nginx serving the very same directory as static
#   files (sendfile on, tcp_nopush on, access_log off, worker_processes auto).
#   Both listen on 127.0.0.1 only, on free ports, and are measured one after
#   the other (nginx, then zarrd) for each case, with the same wrk settings:
#
#     case          key(s)                         expected status
#     64 KiB chunk  small/c/<i>/<j>, NKEYS keys    200 (body checked, see below)
#     1 MiB chunk   large/c/<i>/<j>, NKEYS keys    200
#     zarr.json     small/zarr.json (< 1 KiB)      200
#     missing key   small/c/7/7 (in grid, absent)  404
#
#   at 1, 16 and 64 connections (wrk threads: 1 for 1 connection, else 2),
#   each after a short warmup run whose numbers are discarded, in ROUNDS
#   rounds of one nginx and one zarrd run back to back (alternating which
#   goes first); the table shows medians over the rounds and each round's
#   ratio, since on a small shared VM single runs move by +-20%. Chunk cases
#   rotate through NKEYS distinct keys (random bytes, so nothing compresses);
#   everything sits in the page cache, so this measures the HTTP + file
#   serving path, not the disk.
#
#   Checks, so a fast wrong answer cannot pass as a fast server:
#   - preflight: every key is fetched once with curl from each server and
#     compared byte for byte with its file; the missing key must be a 404;
#   - warmup runs: bench/store_get.lua's response() hook checks the status of
#     every response (200, or 404 for the missing key);
#   - measured runs: no Lua per response (the hook makes wrk copy every body,
#     which on this kind of machine caps wrk at ~2.5k req/s for 1 MiB bodies
#     and would hide the servers' difference), so the check is wrk's own
#     counters: no socket errors or timeouts, no status >= 400 (every
#     response >= 400 for the 404 case), and the bytes received consistent
#     with that server's preflight response size (headers + body, +-128 B
#     per response, plus the partial responses in flight at the end).
#     CHECK=full applies the per-response Lua check to measured runs too.
#   A run that fails a check is marked in the "check" column and makes the
#   script exit 1 (after printing the table).
#
#   The table (markdown, on stdout; progress goes to stderr) has req/s for
#   both servers, the ratio zarrd/nginx, MB/s as received by wrk (headers +
#   bodies, 1 MB = 10^6 bytes) and p99 latency. A bold ratio marks a case at
#   16 or 64 connections below the 0.8x target.
#
# Environment knobs
#   DURATION=5       seconds per measured run (integer)
#   ROUNDS=3         rounds per case and connection count (medians reported)
#   WARMUP=2         seconds of warmup before each measured run (0 = none)
#   CONNS="1 16 64"  connection counts
#   CASES="64k 1m json 404"
#   NKEYS=16         distinct keys per chunk case (1..16)
#   CHECK=warmup     per-response Lua status check in warmup runs only;
#                    CHECK=full: in measured runs too (slows wrk, see above)
#   ZARRD=path       zarrd binary (default ${CARGO_TARGET_DIR:-target}/release/zarrd);
#                    bench/stub_zarrd.py stands in to debug the plumbing
#   NGINX=nginx      nginx binary
#   SERVER_CPUS=, WRK_CPUS=   optional `taskset -c` lists for servers / wrk
#   QUIET_MAX=10     before each case, wait until other processes use < this
#   QUIET_WAIT=120   % of the machine, for at most this many seconds; runs
#                    where they used more are listed under the table
#   OUT=file         also write the table to this file
#   KEEP_TMP=1       keep the temp directory (data, configs, logs)
#
# Needs wrk, nginx, curl and python3 (to pick free ports). Installs nothing;
# if wrk or nginx is missing it prints the apt-get command and exits.
# Both servers are stopped on exit (trap), whatever happens.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

DURATION=${DURATION:-5}
DURATION=${DURATION%s}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2}
WARMUP=${WARMUP%s}
CONNS=${CONNS:-"1 16 64"}
CASES=${CASES:-"64k 1m json 404"}
NKEYS=${NKEYS:-16}
CHECK=${CHECK:-warmup}
case $CHECK in warmup | full) ;; *) echo "store_get.sh: CHECK must be warmup or full, got '$CHECK'" >&2; exit 1 ;; esac
NGINX=${NGINX:-nginx}
OUT=${OUT:-}
KEEP_TMP=${KEEP_TMP:-0}
SERVER_CPUS=${SERVER_CPUS:-}
WRK_CPUS=${WRK_CPUS:-}

target_dir=${CARGO_TARGET_DIR:-target}
[[ $target_dir == /* ]] || target_dir="$REPO/$target_dir"
ZARRD=${ZARRD:-$target_dir/release/zarrd}

LUA="$HERE/store_get.lua"

log() { printf '%s\n' "$*" >&2; }
die() { log "store_get.sh: $*"; exit 1; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_uint "$DURATION" && ((DURATION > 0)) || die "DURATION must be a positive integer (seconds), got '$DURATION'"
is_uint "$WARMUP" || die "WARMUP must be an integer (seconds), got '$WARMUP'"
is_uint "$ROUNDS" && ((ROUNDS >= 1)) || die "ROUNDS must be a positive integer, got '$ROUNDS'"
is_uint "$NKEYS" && ((NKEYS >= 1 && NKEYS <= 16)) || die "NKEYS must be 1..16, got '$NKEYS'"
for c in $CONNS; do is_uint "$c" && ((c >= 1)) || die "CONNS entries must be positive integers, got '$c'"; done
for k in $CASES; do
  case $k in 64k | 1m | json | 404) ;; *) die "unknown case '$k' (known: 64k 1m json 404)" ;; esac
done

# ---------------------------------------------------------------- tools
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
if ! command -v "$NGINX" >/dev/null 2>&1; then
  if [[ $NGINX == nginx && -x /usr/sbin/nginx ]]; then NGINX=/usr/sbin/nginx; else missing+=(nginx); fi
fi
if ((${#missing[@]})); then
  log "missing: ${missing[*]}. Install with:"
  log "    apt-get install -y wrk nginx"
  exit 1
fi
command -v curl >/dev/null 2>&1 || die "curl is needed (apt-get install -y curl)"
command -v python3 >/dev/null 2>&1 || die "python3 is needed to pick free ports"
[[ -x $ZARRD ]] || die "zarrd binary not found at $ZARRD (run: cargo build --release, or set ZARRD=)"
if [[ -n $SERVER_CPUS || -n $WRK_CPUS ]]; then
  command -v taskset >/dev/null 2>&1 || die "SERVER_CPUS/WRK_CPUS need taskset (util-linux)"
fi
server_prefix=()
wrk_prefix=()
[[ -n $SERVER_CPUS ]] && server_prefix=(taskset -c "$SERVER_CPUS")
[[ -n $WRK_CPUS ]] && wrk_prefix=(taskset -c "$WRK_CPUS")

# ---------------------------------------------------------------- cleanup
TMP=""
NGINX_PID=""
ZARRD_PID=""

stop_pid() { # pid name: TERM, wait up to 5 s, then KILL (and the process's own children)
  local pid=$1 name=$2 i kids
  [[ -n $pid ]] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kids=$(pgrep -P "$pid" 2>/dev/null || true)
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) did not stop on TERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  for k in $kids; do kill -KILL "$k" 2>/dev/null || true; done
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$ZARRD_PID" zarrd
  stop_pid "$NGINX_PID" nginx
  if [[ -n $TMP && -d $TMP ]]; then
    if [[ $KEEP_TMP == 1 ]]; then log "kept $TMP"; else rm -rf -- "$TMP"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zarrd-bench.XXXXXX")
chmod 755 "$TMP"
DATA="$TMP/data"

# ---------------------------------------------------------------- data
# Two uint8 arrays with the "bytes" codec only, so random bytes are valid
# chunks: small (256x256 chunks = 64 KiB) and large (1024x1024 = 1 MiB).
log "creating data in $DATA"
mkdir -p "$DATA/small/c" "$DATA/large/c"
cat >"$DATA/zarr.json" <<'EOF'
{"zarr_format":3,"node_type":"group","attributes":{}}
EOF
write_array_meta() { # dir shape chunk
  cat >"$1/zarr.json" <<EOF
{
  "zarr_format": 3,
  "node_type": "array",
  "shape": [$2, $2],
  "data_type": "uint8",
  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [$3, $3]}},
  "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
  "fill_value": 0,
  "codecs": [{"name": "bytes"}],
  "attributes": {"description": "zarrd store_get benchmark data (random bytes)"},
  "dimension_names": ["y", "x"]
}
EOF
}
write_array_meta "$DATA/small" 2048 256  # 8x8 grid; 16 chunks stored
write_array_meta "$DATA/large" 4096 1024 # 4x4 grid; all 16 stored

SMALL_KEYS=()
LARGE_KEYS=()
for i in 0 1 2 3; do
  mkdir -p "$DATA/small/c/$i" "$DATA/large/c/$i"
  for j in 0 1 2 3; do
    head -c 65536 /dev/urandom >"$DATA/small/c/$i/$j"
    head -c 1048576 /dev/urandom >"$DATA/large/c/$i/$j"
    SMALL_KEYS+=("small/c/$i/$j")
    LARGE_KEYS+=("large/c/$i/$j")
  done
done
MISSING_KEY="small/c/7/7"
JSON_KEY="small/zarr.json"
[[ ! -e $DATA/$MISSING_KEY ]] || die "internal: $MISSING_KEY exists"
JSON_SIZE=$(stat -c %s "$DATA/$JSON_KEY")
((JSON_SIZE < 1024)) || die "internal: zarr.json is $JSON_SIZE bytes (want < 1 KiB)"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$DATA/$JSON_KEY" || die "internal: zarr.json is not JSON"
chmod -R a+rX "$DATA"

# ---------------------------------------------------------------- ports
free_port() {
  python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
NGINX_PORT=$(free_port)
ZARRD_PORT=$(free_port)
for ((i = 0; i < 10 && ZARRD_PORT == NGINX_PORT; i++)); do ZARRD_PORT=$(free_port); done
((ZARRD_PORT != NGINX_PORT)) || die "could not find two distinct free ports"

wait_http() { # name url pid: wait (bounded, 30 s) until GET url answers 200
  local name=$1 url=$2 pid=$3 i code
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || return 1
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)
    [[ $code == 200 ]] && return 0
    sleep 0.1
  done
  log "$name did not answer 200 on $url within 30 s (last status: ${code:-none})"
  return 1
}

# ---------------------------------------------------------------- nginx
mkdir -p "$TMP/nginx/tmp" "$TMP/nginx/logs"
user_line=""
# As root, nginx workers would drop to "nobody"; keep the invoking user so
# they can read the temp directory wherever TMPDIR points.
if ((EUID == 0)); then user_line="user $(id -un) $(id -gn);"; fi
cat >"$TMP/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes auto;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
$user_line

events {
    worker_connections 1024;
}

http {
    access_log off;
    log_not_found off;          # 404s must not cost an error-log write
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 1000000; # default 1000 would make wrk reconnect
    server_tokens off;
    default_type application/octet-stream;
    types { application/json json; }

    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path       $TMP/nginx/tmp/proxy;
    fastcgi_temp_path     $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path       $TMP/nginx/tmp/uwsgi;
    scgi_temp_path        $TMP/nginx/tmp/scgi;

    server {
        listen 127.0.0.1:$NGINX_PORT;
        server_name localhost;
        location /zarr/data/ {
            alias $DATA/;
        }
        location / {
            return 404;
        }
    }
}
EOF
nginx_args=(-p "$TMP/nginx/" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log")
if ! "$NGINX" -t "${nginx_args[@]}" >"$TMP/nginx/logs/test.log" 2>&1; then
  cat "$TMP/nginx/logs/test.log" >&2
  die "nginx rejected its configuration"
fi
log "starting nginx on 127.0.0.1:$NGINX_PORT"
"${server_prefix[@]}" "$NGINX" "${nginx_args[@]}" >"$TMP/nginx/logs/stdout.log" 2>&1 &
NGINX_PID=$!
if ! wait_http nginx "http://127.0.0.1:$NGINX_PORT/zarr/data/$JSON_KEY" "$NGINX_PID"; then
  cat "$TMP/nginx/logs/error.log" "$TMP/nginx/logs/stdout.log" >&2 2>/dev/null || true
  die "nginx did not start"
fi

# ---------------------------------------------------------------- zarrd
log "starting zarrd ($ZARRD) on 127.0.0.1:$ZARRD_PORT"
RUST_LOG=warn "${server_prefix[@]}" "$ZARRD" serve --bind "127.0.0.1:$ZARRD_PORT" \
  --mount "data=$DATA" >"$TMP/zarrd.out" 2>"$TMP/zarrd.err" &
ZARRD_PID=$!
listening=""
for ((i = 0; i < 300; i++)); do
  listening=$(grep -m1 -o 'zarrd listening on http://[^ ]*' "$TMP/zarrd.out" 2>/dev/null || true)
  [[ -n $listening ]] && break
  kill -0 "$ZARRD_PID" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $listening ]]; then
  log "--- zarrd stdout"; cat "$TMP/zarrd.out" >&2 || true
  log "--- zarrd stderr"; cat "$TMP/zarrd.err" >&2 || true
  die "zarrd did not print its listening line within 30 s"
fi
ZARRD_BASE=${listening#zarrd listening on }
ZARRD_BASE=${ZARRD_BASE%/}
if ! wait_http zarrd "$ZARRD_BASE/zarr/data/$JSON_KEY" "$ZARRD_PID"; then
  cat "$TMP/zarrd.err" >&2 || true
  die "zarrd did not serve $JSON_KEY"
fi
NGINX_BASE="http://127.0.0.1:$NGINX_PORT"

# ---------------------------------------------------------------- preflight
# Every key once from each server: right status, identical bytes.
# Also records each server's full response size (headers + body) per case.
declare -A RESP_SIZE=()
preflight() { # name base
  local name=$1 base=$2 key out code size n=0
  for key in "${SMALL_KEYS[@]:0:NKEYS}" "${LARGE_KEYS[@]:0:NKEYS}" "$JSON_KEY"; do
    out=$(curl -s -o "$TMP/got" -w '%{http_code} %{size_header}' --max-time 10 "$base/zarr/data/$key" || true)
    code=${out%% *}
    [[ $code == 200 ]] || die "$name: GET $key answered ${code:-nothing}, expected 200"
    cmp -s "$TMP/got" "$DATA/$key" || die "$name: GET $key returned different bytes than the file"
    size=$((${out##* } + $(stat -c %s "$TMP/got")))
    case $key in
      "${SMALL_KEYS[0]}") RESP_SIZE[$name:64k]=$size ;;
      "${LARGE_KEYS[0]}") RESP_SIZE[$name:1m]=$size ;;
      "$JSON_KEY") RESP_SIZE[$name:json]=$size ;;
    esac
    n=$((n + 1))
  done
  out=$(curl -s -o "$TMP/got" -w '%{http_code} %{size_header}' --max-time 10 "$base/zarr/data/$MISSING_KEY" || true)
  code=${out%% *}
  [[ $code == 404 ]] || die "$name: GET $MISSING_KEY (missing) answered ${code:-nothing}, expected 404"
  RESP_SIZE[$name:404]=$((${out##* } + $(stat -c %s "$TMP/got")))
  log "preflight $name: $n keys byte-identical, missing key -> 404; response sizes:" \
    "64k ${RESP_SIZE[$name:64k]}, 1m ${RESP_SIZE[$name:1m]}, json ${RESP_SIZE[$name:json]}, 404 ${RESP_SIZE[$name:404]} B"
}
preflight nginx "$NGINX_BASE"
preflight zarrd "$ZARRD_BASE"

# ---------------------------------------------------------------- runs
case_paths() { # case -> space-separated request paths
  local k out=()
  case $1 in
    64k) for k in "${SMALL_KEYS[@]:0:NKEYS}"; do out+=("/zarr/data/$k"); done ;;
    1m) for k in "${LARGE_KEYS[@]:0:NKEYS}"; do out+=("/zarr/data/$k"); done ;;
    json) out=("/zarr/data/$JSON_KEY") ;;
    404) out=("/zarr/data/$MISSING_KEY") ;;
  esac
  echo "${out[*]}"
}
case_status() { [[ $1 == 404 ]] && echo 404 || echo 200; }
case_label() {
  case $1 in
    64k) echo "64 KiB chunk (${NKEYS} keys)" ;;
    1m) echo "1 MiB chunk (${NKEYS} keys)" ;;
    json) echo "zarr.json (${JSON_SIZE} B)" ;;
    404) echo "missing key (404)" ;;
  esac
}

# run_wrk base case conns seconds logfile lua_check(0|1) -> prints the BENCH_RESULT line
run_wrk() {
  local base=$1 cse=$2 conns=$3 secs=$4 logf=$5 luack=$6 threads=2 paths first
  ((conns == 1)) && threads=1
  paths=$(case_paths "$cse")
  first=${paths%% *}
  BENCH_PATHS="$paths" EXPECT_STATUS=$(case_status "$cse") BENCH_CHECK=$luack \
    timeout -k 5 $((secs + 30)) "${wrk_prefix[@]}" wrk -t"$threads" -c"$conns" -d"${secs}s" \
    --timeout 10s -s "$LUA" "$base$first" >"$logf" 2>&1 || true
  grep -m1 '^BENCH_RESULT ' "$logf" || true
}

field() { # line name -> value
  local f
  for f in $1; do [[ $f == "$2="* ]] && { echo "${f#*=}"; return; }; done
  echo 0
}

# check_result line case server conns -> "ok" or a short problem description
check_result() {
  local line=$1 cse=$2 srv=$3 conns=$4 req bad chk st want bytes sockerr avg
  [[ -n $line ]] || { echo "no result"; return; }
  req=$(field "$line" requests)
  ((req > 0)) || { echo "0 requests"; return; }
  sockerr=$(($(field "$line" err_connect) + $(field "$line" err_read) + $(field "$line" err_write) + $(field "$line" err_timeout)))
  ((sockerr == 0)) || { echo "$sockerr socket errors/timeouts"; return; }
  st=$(case_status "$cse")
  if [[ $(field "$line" check) == 1 ]]; then
    bad=$(field "$line" mismatched)
    chk=$(field "$line" checked)
    ((bad == 0)) || { echo "$bad/$chk not $st (first: $(field "$line" first_bad))"; return; }
  else
    local es
    es=$(field "$line" err_status)
    if [[ $st == 404 ]]; then
      ((es == req)) || { echo "$((req - es)) of $req not >=400"; return; }
    else
      ((es == 0)) || { echo "$es of $req >=400"; return; }
    fi
  fi
  # wrk's byte count also includes the partial responses in flight when the
  # run stops (up to one per connection), so only the lower bound is tight.
  want=${RESP_SIZE[$srv:$cse]}
  bytes=$(field "$line" bytes)
  avg=$((bytes / req))
  if ((bytes < (want - 128) * req || bytes > (want + 128) * req + conns * want)); then
    echo "avg response $avg B, preflight response $want B"
    return
  fi
  echo ok
}

# ---- background CPU: this is often a shared machine (builds, tests). Each
# measured run records how much CPU went to processes other than wrk and the
# two servers; before each case the script waits (bounded) for a quiet box.
machine_ticks() { # -> "busy total" jiffies over all CPUs
  awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6; exit }' /proc/stat
}
pids_ticks() { # pid... -> utime+stime jiffies (all threads) of the live ones
  local p t=0 st
  for p in "$@"; do
    st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    st=${st##*) }
    # after "comm)": field 3 is state; utime/stime are fields 14/15 overall
    t=$((t + $(awk '{ print $12 + $13 }' <<<"$st")))
  done
  echo "$t"
}
children_ticks() { # sets CH: CPU of this shell's waited-for children, in jiffies
  # `times` must run in this shell, not in a $(...) subshell (whose children
  # counters start at zero), so the result comes back in a variable.
  times >"$TMP/times"
  CH=$(awk 'NR == 2 {
    s = 0
    for (i = 1; i <= 2; i++) { split($i, a, /m|s/); s += a[1] * 60 + a[2] }
    printf "%d", s * 100 }' "$TMP/times")
}
QUIET_MAX=${QUIET_MAX:-10}
QUIET_WAIT=${QUIET_WAIT:-120}
wait_quiet() { # wait (at most QUIET_WAIT s) until other processes use < QUIET_MAX % of the machine
  local t0 b0 b1 t1 pct waited=0
  while :; do
    read -r b0 t0 < <(machine_ticks)
    sleep 1
    read -r b1 t1 < <(machine_ticks)
    pct=$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
    ((pct < QUIET_MAX)) && return 0
    if ((waited >= QUIET_WAIT)); then
      log "  machine still ${pct}% busy after ${QUIET_WAIT}s; measuring anyway"
      return 0
    fi
    ((waited == 0)) && log "  machine ${pct}% busy with other work; waiting up to ${QUIET_WAIT}s"
    waited=$((waited + 1))
  done
}

median() { # numbers... -> their median (the mean of the middle two for an even count)
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print 0; exit }
    if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
fmt_rps() { awk -v r="$1" -v d="$2" 'BEGIN { if (d > 0) printf "%.0f", r * 1e6 / d; else printf "0" }'; }
fmt_mbs() { awk -v b="$1" -v d="$2" 'BEGIN { if (d > 0) printf "%.1f", b / d; else printf "0" }'; }
fmt_ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }

nruns=0
for cse in $CASES; do for c in $CONNS; do nruns=$((nruns + 2 * ROUNDS)); done; done
log "running $nruns measurements of ${DURATION}s (+${WARMUP}s warmup each): ~$((nruns * (DURATION + WARMUP) / 60 + 1)) min"

rows=()
noisy=()
failed=0
# Server processes whose CPU counts as "ours": nginx master + workers, zarrd.
mapfile -t SERVER_PIDS < <(echo "$NGINX_PID"; pgrep -P "$NGINX_PID" || true; echo "$ZARRD_PID")
target_runs=0
below=()
run_no=0
for cse in $CASES; do
  for c in $CONNS; do
    declare -A rps=() mbs=() p99=() chk=() bg=() rps_l=() mbs_l=() p99_l=()
    chk[nginx]=ok chk[zarrd]=ok bg[nginx]=0 bg[zarrd]=0
    round_ratios=()
    wait_quiet
    for ((round = 1; round <= ROUNDS; round++)); do
    # Alternate which server goes first, so neither always runs on the
    # warmer (or the more disturbed) half of a round.
    order="nginx zarrd"
    ((round % 2 == 0)) && order="zarrd nginx"
    declare -A r_rps=()
    for srv in $order; do
      base=$NGINX_BASE pid=$NGINX_PID
      [[ $srv == zarrd ]] && base=$ZARRD_BASE pid=$ZARRD_PID
      kill -0 "$pid" 2>/dev/null || die "$srv (pid $pid) died; see logs (KEEP_TMP=1 keeps them)"
      run_no=$((run_no + 1))
      log "[$run_no/$nruns] $srv  $(case_label "$cse")  c=$c  round $round/$ROUNDS"
      warm="not run"
      if ((WARMUP > 0)); then
        wlog="$TMP/wrk-$srv-$cse-$c-$round-warmup.log"
        wline=$(run_wrk "$base" "$cse" "$c" "$WARMUP" "$wlog" 1)
        warm=$(check_result "$wline" "$cse" "$srv" "$c")
      fi
      logf="$TMP/wrk-$srv-$cse-$c-$round.log"
      read -r mb0 mt0 < <(machine_ticks)
      sp0=$(pids_ticks "${SERVER_PIDS[@]}")
      children_ticks
      ch0=$CH
      line=$(run_wrk "$base" "$cse" "$c" "$DURATION" "$logf" "$([[ $CHECK == full ]] && echo 1 || echo 0)")
      children_ticks
      ch1=$CH
      sp1=$(pids_ticks "${SERVER_PIDS[@]}")
      read -r mb1 mt1 < <(machine_ticks)
      other=$(((mb1 - mb0) - (sp1 - sp0) - (ch1 - ch0)))
      ((other > 0)) || other=0
      other=$((other * 100 / (mt1 - mt0 > 0 ? mt1 - mt0 : 1)))
      ((other > bg[$srv])) && bg[$srv]=$other
      ((other < QUIET_MAX)) || noisy+=("$(case_label "$cse") at $c connections, round $round, $srv: ${other}%")
      d=$(field "$line" duration_us)
      r_rps[$srv]=$(fmt_rps "$(field "$line" requests)" "$d")
      rps_l[$srv]+="${r_rps[$srv]} "
      mbs_l[$srv]+="$(fmt_mbs "$(field "$line" bytes)" "$d") "
      p99_l[$srv]+="$(fmt_ms "$(field "$line" p99_us)") "
      measured=$(check_result "$line" "$cse" "$srv" "$c")
      this=$measured
      if [[ $warm != ok && $warm != "not run" ]]; then
        this="warmup: $warm"
        logf=$wlog
      fi
      if [[ $this != ok ]]; then
        failed=1
        [[ ${chk[$srv]} == ok ]] && chk[$srv]="round $round: $this"
        log "  CHECK FAILED for $srv: $this"
        sed 's/^/    wrk: /' "$logf" >&2 || true
      fi
      log "  ${r_rps[$srv]} req/s, other CPU ${other}%, check: $measured (warmup: $warm)"
    done
    round_ratios+=("$(awk -v z="${r_rps[zarrd]}" -v n="${r_rps[nginx]}" 'BEGIN { if (n > 0) printf "%.2f", z / n; else printf "n/a" }')")
    unset r_rps
    done
    for srv in nginx zarrd; do
      # shellcheck disable=SC2086 # the lists are space-separated numbers
      rps[$srv]=$(printf '%.0f' "$(median ${rps_l[$srv]})")
      # shellcheck disable=SC2086
      mbs[$srv]=$(printf '%.1f' "$(median ${mbs_l[$srv]})")
      # shellcheck disable=SC2086
      p99[$srv]=$(printf '%.2f' "$(median ${p99_l[$srv]})")
    done
    ratio=$(awk -v z="${rps[zarrd]}" -v n="${rps[nginx]}" 'BEGIN { if (n > 0) printf "%.2f", z / n; else printf "n/a" }')
    shown=$ratio
    ((c >= 16)) && target_runs=$((target_runs + 1))
    if [[ $ratio != n/a ]] && ((c >= 16)) && awk -v r="$ratio" 'BEGIN { exit !(r < 0.8) }'; then
      shown="**$ratio**"
      below+=("$(case_label "$cse") at $c connections: ${ratio}x")
    fi
    if [[ ${chk[nginx]} == ok && ${chk[zarrd]} == ok ]]; then
      check=ok
    else
      check="nginx: ${chk[nginx]}; zarrd: ${chk[zarrd]}"
    fi
    rows+=("| $(case_label "$cse") | $c | ${rps[nginx]} | ${rps[zarrd]} | $shown | $(IFS=/; echo "${round_ratios[*]}") | ${mbs[nginx]} | ${mbs[zarrd]} | ${p99[nginx]} | ${p99[zarrd]} | ${bg[nginx]} / ${bg[zarrd]} | $check |")
    unset rps mbs p99 chk bg rps_l mbs_l p99_l
  done
done

# ---------------------------------------------------------------- report
zarrd_rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "no commit")
[[ $zarrd_rev == "no commit" ]] || git -C "$REPO" diff --quiet HEAD -- 2>/dev/null || zarrd_rev="$zarrd_rev (+ uncommitted changes)"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || echo unknown)
report() {
  echo "## store GET: zarrd vs nginx"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs ($cpu), Linux $(uname -r)"
  echo "- zarrd: \`$ZARRD\` (built $(date -u -r "$ZARRD" '+%Y-%m-%d %H:%M UTC'); repo HEAD $zarrd_rev), RUST_LOG=warn; $("$NGINX" -v 2>&1 | sed 's/.*version: //') (sendfile, tcp_nopush, access_log off, worker_processes auto)"
  echo "- wrk $(wrk -v 2>&1 | awk 'NR==1 {print $2}'), ${DURATION} s per run after ${WARMUP} s warmup; threads 1 at 1 connection, else 2; loopback; status check: $([[ $CHECK == full ]] && echo 'every response, Lua hook in measured runs (slows wrk)' || echo "every response in warmup (Lua hook), wrk counters + response size in measured runs")"
  [[ -n $SERVER_CPUS || -n $WRK_CPUS ]] && echo "- pinning: servers on CPUs ${SERVER_CPUS:-any}, wrk on CPUs ${WRK_CPUS:-any}"
  echo "- $ROUNDS round(s) per case and connection count, nginx and zarrd back to back, alternating which goes first; req/s, MB/s and p99 are medians over the rounds, the ratio is of the medians, and \"per round\" lists each round's zarrd/nginx ratio."
  echo "- MB/s: bytes received by wrk (headers + body) per second, 1 MB = 10^6 B. Bold ratio: below the 0.8x target (16 and 64 connections). Other CPU: share of the whole machine used by processes other than wrk and the servers during the nginx / zarrd run (the largest over the rounds)."
  echo
  echo "| case | conns | nginx req/s | zarrd req/s | zarrd/nginx | per round | nginx MB/s | zarrd MB/s | nginx p99 ms | zarrd p99 ms | other CPU % n/z | check |"
  echo "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  if ((${#below[@]})); then
    echo "Below 0.8x nginx req/s:"
    printf -- '- %s\n' "${below[@]}"
  elif ((target_runs)); then
    echo "All cases at 16 and 64 connections meet 0.8x nginx req/s."
  fi
  if ((${#noisy[@]})); then
    echo
    echo "Runs where other processes used >= ${QUIET_MAX}% of the machine (numbers less reliable):"
    printf -- '- %s\n' "${noisy[@]}"
  fi
  if ((failed)); then
    echo
    echo "**Some runs failed their checks (see the check column); their numbers are not valid.**"
  fi
}
if [[ -n $OUT ]]; then
  report | tee "$OUT"
else
  report
fi
exit "$failed"
