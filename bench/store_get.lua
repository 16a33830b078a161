-- wrk script used by bench/store_get.sh.
--
-- Environment (read by every wrk thread):
--   BENCH_PATHS   space-separated request paths; requests rotate through them
--                 (each thread starts at a different offset). One path = a
--                 static request, no per-request Lua.
--   EXPECT_STATUS the status every response must have (200 or 404).
--   BENCH_CHECK   "1" (default): count responses whose status differs from
--                 EXPECT_STATUS via the response() hook. "0": skip the hook
--                 (wrk then does not buffer bodies); only wrk's own
--                 "status > 399" error counter is checked.
--
-- done() prints one machine-readable line starting with "BENCH_RESULT".

local paths = {}
for p in string.gmatch(os.getenv("BENCH_PATHS") or "/", "%S+") do
  paths[#paths + 1] = p
end
local expect = tonumber(os.getenv("EXPECT_STATUS") or "200")
local check = (os.getenv("BENCH_CHECK") or "1") ~= "0"

-- setup/done run in their own Lua state; keep the thread handles there.
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("thread_id", next_id)
  next_id = next_id + 1
  threads[#threads + 1] = thread
end

-- Per-thread running state (globals so thread:get can read them).
mismatched = 0
checked = 0
first_bad = 0

local reqs = {}
local n, i = 0, 0

function init(args)
  for k, p in ipairs(paths) do
    reqs[k] = wrk.format("GET", p)
  end
  n = #reqs
  i = (thread_id or 0) % n
  if n == 1 then
    -- wrk builds the static request from wrk.path after init(); set both.
    wrk.path = paths[1]
    local r = reqs[1]
    wrk.request = function() return r end
    request = nil           -- static request: no Lua call per request
  end
  if not check then
    response = nil          -- wrk skips header/body parsing entirely
  end
end

function request()
  i = i + 1
  if i > n then i = 1 end
  return reqs[i]
end

function response(status, headers, body)
  checked = checked + 1
  if status ~= expect then
    mismatched = mismatched + 1
    if first_bad == 0 then first_bad = status end
  end
end

function done(summary, latency, requests)
  local bad, seen, fb = 0, 0, 0
  for _, t in ipairs(threads) do
    bad = bad + (t:get("mismatched") or 0)
    seen = seen + (t:get("checked") or 0)
    local f = t:get("first_bad") or 0
    if fb == 0 and f ~= 0 then fb = f end
  end
  local e = summary.errors
  io.write(string.format(
    "BENCH_RESULT requests=%d duration_us=%d bytes=%d checked=%d mismatched=%d first_bad=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_timeout=%d err_status=%d " ..
    "p50_us=%d p99_us=%d expect=%d check=%d\n",
    summary.requests, summary.duration, summary.bytes, seen, bad, fb,
    e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), expect, check and 1 or 0))
end
