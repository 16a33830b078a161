-- wrk script used by bench/table.py: cycles through a list of requests.
--
-- Environment (read by every wrk thread):
--   BENCH_REQS   a file with one request per line: the path, then optionally a
--                tab and a Range header value ("bytes=10-99"). Each thread
--                starts at a different offset and cycles through all of them.
--   BENCH_CHECK  "1": count responses whose status is not EXPECT_STATUS (the
--                response() hook makes wrk read each body: warmup runs only).
--   EXPECT_STATUS the status every response must have (with BENCH_CHECK=1).
--
-- done() prints one line starting with "BENCH_RESULT".

local reqs = {}
local n, i = 0, 0
local expect = tonumber(os.getenv("EXPECT_STATUS") or "200")
local check = os.getenv("BENCH_CHECK") == "1"

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("thread_id", next_id)
  next_id = next_id + 1
  threads[#threads + 1] = thread
end

mismatched = 0
checked = 0

function init(args)
  local f = assert(io.open(os.getenv("BENCH_REQS"), "r"))
  for line in f:lines() do
    local path, range = string.match(line, "^([^\t]+)\t?(.*)$")
    if path then
      local headers = {}
      if range and #range > 0 then
        headers["Range"] = range
      end
      reqs[#reqs + 1] = wrk.format("GET", path, headers)
    end
  end
  f:close()
  n = #reqs
  i = ((thread_id or 0) * 37) % n
  if not check then
    response = nil
  end
end

function request()
  i = i + 1
  if i > n then
    i = 1
  end
  return reqs[i]
end

function response(status, headers, body)
  checked = checked + 1
  if status ~= expect then
    mismatched = mismatched + 1
  end
end

function done(summary, latency, requests)
  local bad, seen = 0, 0
  for _, t in ipairs(threads) do
    bad = bad + (t:get("mismatched") or 0)
    seen = seen + (t:get("checked") or 0)
  end
  io.write(string.format("BENCH_RESULT checked=%d mismatched=%d\n", seen, bad))
end
