#!lua name=slidingwindow
--[[
The slidingwindow module's limiter as a Redis Functions library: the same replies, the
same key bytes, the same expiry. A deployment can move between the module and this
library, either way, without losing a count.

Two ways to run this one file:

  Redis 7.0+ / Valkey 7.2+ (Functions):
    FUNCTION LOAD REPLACE <this file>
    FCALL    slidingwindow_check  1 key limit window [now] [LIMIT l w]... [COST c] [MS] [DETAILS]
    FCALL    slidingwindow_refund 1 key <same as check>
    FCALL_RO slidingwindow_peek   1 key <same as check>
    FCALL_RO slidingwindow_counts 1 key window [now] [MS]
    FCALL_RO slidingwindow_version 0
    FCALL_RO slidingwindow_permissions 1 key   (which commands it calls this user may not run)

  Redis 6.2, or where FUNCTION is refused (EVAL / EVALSHA):
    send everything AFTER THE FIRST LINE (the `#!lua` line is a syntax error for EVAL),
    and put the function's name first among the arguments:
    EVALSHA <sha1 of that body> 1 key slidingwindow_check limit window ...
    EVALSHA <sha1 of that body> 0 slidingwindow_version
  The body registers the functions when FUNCTION LOAD runs it (redis.register_function
  exists only there) and otherwise dispatches on ARGV[1].

Arithmetic: Lua numbers are doubles. Every input is at most 2^53 - 1, so it is exact;
the few results that can pass 2^53 (times to wait, expiries in ms, "two windows on")
are computed as two-part integers (`big`), exactly as the module computes them in u64.
Waits in replies are capped at 2^53 - 1, as the module's are.
]]

local VERSION = '0.3.0'
local MAX = 9007199254740991 -- 2^53 - 1: the largest count, time or window
local MAX_LIMITS = 8
local MAX_WINDOWS = 8
local MAX_WINDOW_S = 9007199254740 -- floor(MAX / 1000): the longest window in seconds
local TWO32 = 4294967296
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local CHECK_OPTIONS = 'LIMIT, COST, MS or DETAILS'

-- Bound by the first call: FUNCTION LOAD runs this body without the standard libraries.
local byte, char, strfind, format, floor, fmod, unpack, typeof, rcall, rpcall

local function bind()
  if not floor then
    byte, char, strfind, format = string.byte, string.char, string.find, string.format
    floor, fmod, unpack, typeof = math.floor, math.fmod, _G.unpack, type
    rcall, rpcall = redis.call, redis.pcall
  end
end

-- Exact integer division of 0 <= a < 2^53 by b >= 1 (a / b alone can round up).
local function divmod(a, b)
  local r = fmod(a, b)
  return (a - r) / b, r
end

local function int(n)
  return format('%d', n)
end

-- Two-part integers {hi, lo}, value hi * 2^32 + lo with 0 <= lo < 2^32: exact to 2^84.
local function big(n) -- n an exact integer, |n| < 2^53
  local h = floor(n / TWO32)
  return { h, n - h * TWO32 }
end

local function badd(a, b)
  local l = a[2] + b[2]
  local c = floor(l / TWO32)
  return { a[1] + b[1] + c, l - c * TWO32 }
end

local function bmul(a, k) -- k <= 1000
  local l = a[2] * k
  local c = floor(l / TWO32)
  return { a[1] * k + c, l - c * TWO32 }
end

local function bless(a, b) -- a < b
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

-- The value capped at 2^53 - 1: what a reply may carry.
local function bcap(a)
  if a[1] >= 2097152 then -- 2^53 / 2^32
    return MAX
  end
  return a[1] * TWO32 + a[2]
end

local function bdecimal(a) -- a >= 0
  local qh, rh = divmod(a[1], 1000000)
  local ql, rl = divmod(rh * TWO32 + a[2], 1000000)
  local q = qh * TWO32 + ql
  if q > 0 then
    return int(q) .. string.format('%06d', rl)
  end
  return int(rl)
end

------------------------------------------------------------------ arguments (args.rs)

local function range_err(name, lo, hi, unit)
  return 'ERR ' .. name .. ' must be an integer from ' .. int(lo) .. ' to ' .. int(hi) .. (unit or '')
end

-- A decimal integer in lo..hi: ASCII digits only.
local function int_in(s, lo, hi)
  local n = #s
  if n == 0 then
    return nil
  end
  local v = 0
  for i = 1, n do
    local b = byte(s, i)
    if b < 48 or b > 57 then
      return nil
    end
    v = v * 10 + (b - 48)
    if v > hi then
      return nil
    end
  end
  if v < lo then
    return nil
  end
  return v
end

local function is(s, word)
  return #s == #word and string.upper(s) == word
end

-- A number, even a bad one, right after the window is meant as `now`.
local function looks_numeric(s)
  local b = byte(s, 1)
  return b ~= nil and ((b >= 48 and b <= 57) or b == 45 or b == 43 or b == 46)
end

local function unknown(s, expected)
  local shown = {}
  for i = 1, math.min(#s, 32) do
    local b = byte(s, i)
    shown[i] = (b >= 32 and b <= 126) and char(b) or '?'
  end
  local more = #s > 32 and '...' or ''
  return "ERR unknown option '" .. table.concat(shown) .. more .. "' (expected " .. expected .. ')'
end

local function window_in(s, ms)
  local hi = ms and MAX or MAX_WINDOW_S
  local w = int_in(s, 1, hi)
  if not w then
    return nil, range_err('window', 1, hi, ms and ' milliseconds (MS)' or ' seconds')
  end
  return w
end

-- `[now]` right after the window: (now or nil, index of the first option) or error.
local function split_now(a, i)
  if a[i] ~= nil and looks_numeric(a[i]) then
    local now = int_in(a[i], 0, MAX)
    if not now then
      return nil, nil, range_err('now', 0, MAX)
    end
    return now, i + 1
  end
  return nil, i
end

-- `limit window [now] [LIMIT limit window]... [COST cost] [MS] [DETAILS]`.
local function parse_check(a, arity)
  if #a < 2 then
    return nil, arity
  end
  local now, i, e = split_now(a, 3)
  if e then
    return nil, e
  end
  local ms = false
  for j = i, #a do
    if is(a[j], 'MS') then
      ms = true
      break
    end
  end
  local limits = {}
  local function add(l, w)
    if #limits == MAX_LIMITS then
      return 'ERR at most 8 limits per call (the positional one and each LIMIT)'
    end
    local limit = int_in(l, 0, MAX)
    if not limit then
      return range_err('limit', 0, MAX)
    end
    local window, err = window_in(w, ms)
    if not window then
      return err
    end
    for _, x in ipairs(limits) do
      if x.window == window then
        return 'ERR two limits have the same window (' .. int(window) .. ' '
          .. (ms and 'milliseconds' or 'seconds') .. '): give each window once'
      end
    end
    limits[#limits + 1] = { limit = limit, window = window }
  end
  e = add(a[1], a[2])
  if e then
    return nil, e
  end
  local cost, seen_ms, details
  local n = #a
  while i <= n do
    local o = a[i]
    if is(o, 'LIMIT') then
      if i + 2 > n then
        return nil, 'ERR LIMIT needs a limit and a window'
      end
      e = add(a[i + 1], a[i + 2])
      if e then
        return nil, e
      end
      i = i + 3
    elseif is(o, 'COST') then
      if cost then
        return nil, 'ERR COST given more than once'
      end
      if i + 1 > n then
        return nil, 'ERR COST needs a value'
      end
      cost = int_in(a[i + 1], 1, MAX)
      if not cost then
        return nil, range_err('cost', 1, MAX)
      end
      i = i + 2
    elseif is(o, 'MS') then
      if seen_ms then
        return nil, 'ERR MS given more than once'
      end
      seen_ms = true
      i = i + 1
    elseif is(o, 'DETAILS') then
      if details then
        return nil, 'ERR DETAILS given more than once'
      end
      details = true
      i = i + 1
    else
      return nil, unknown(o, CHECK_OPTIONS)
    end
  end
  return { limits = limits, ms = ms, now = now, cost = cost or 1, details = details or false }
end

-- `window [now] [MS]`.
local function parse_counts(a, arity)
  if #a < 1 then
    return nil, arity
  end
  local now, i, e = split_now(a, 2)
  if e then
    return nil, e
  end
  local ms = false
  for j = i, #a do
    if not is(a[j], 'MS') then
      return nil, unknown(a[j], 'MS')
    end
    if ms then
      return nil, 'ERR MS given more than once'
    end
    ms = true
  end
  local window, err = window_in(a[1], ms)
  if not window then
    return nil, err
  end
  return { window = window, ms = ms, now = now }
end

------------------------------------------------------------------- the bytes (encoding.rs)

local function read_varint(s, pos, last)
  local v, mul = 0, 1
  for i = 0, 7 do
    if pos + i > last then
      return nil
    end
    local b = byte(s, pos + i)
    v = v + (b % 128) * mul -- exact until v passes 2^53, which is refused below
    mul = mul * 128
    if b < 128 then
      -- a zero last byte after the first is an overlong form
      if (i > 0 and b == 0) or v > MAX then
        return nil
      end
      return v, pos + i + 1
    end
  end
  return nil
end

local function read_counter(s, pos, last)
  if pos > last then
    return nil
  end
  local flags = byte(s, pos)
  if flags > 1 then
    return nil
  end
  local ms = flags == 1
  local vals, p = {}, pos + 1
  for k = 1, 4 do
    vals[k], p = read_varint(s, p, last)
    if not vals[k] then
      return nil
    end
  end
  local window, index = vals[1], vals[2]
  if window == 0 or window > (ms and MAX or MAX_WINDOW_S) or index > divmod(MAX, window) then
    return nil
  end
  return { ms = ms, window = window, index = index, current = vals[3], previous = vals[4] }, p
end

local function before(a, b) -- sort order: seconds first, then by window
  if a.ms ~= b.ms then
    return b.ms
  end
  return a.window < b.window
end

-- The counters a state holds, or nil when the bytes are not a state.
local function decode(s)
  local n = #s
  if n < 6 or n > 2 + MAX_WINDOWS * 33 then
    return nil
  end
  local v = byte(s, 1)
  if v == 0xA1 then
    local c, p = read_counter(s, 2, n)
    if not c or p ~= n + 1 then
      return nil
    end
    return { c }
  elseif v == 0xA2 then
    local count = byte(s, 2)
    if count < 2 or count > MAX_WINDOWS then
      return nil
    end
    local out, p = {}, 3
    for i = 1, count do
      local c
      c, p = read_counter(s, p, n)
      if not c or (i > 1 and not before(out[i - 1], c)) then
        return nil
      end
      out[i] = c
    end
    if p ~= n + 1 then
      return nil
    end
    return out
  end
  return nil
end

local function put_varint(v, out)
  while v >= 128 do
    local low = fmod(v, 128)
    out[#out + 1] = char(low + 128)
    v = (v - low) / 128
  end
  out[#out + 1] = char(v)
end

local function put_counter(c, out)
  out[#out + 1] = char(c.ms and 1 or 0)
  put_varint(c.window, out)
  put_varint(c.index, out)
  put_varint(c.current, out)
  put_varint(c.previous, out)
end

local function encode(counters)
  local out = {}
  if #counters == 1 then
    out[1] = char(0xA1)
  else
    out[1] = char(0xA2)
    out[2] = char(#counters)
  end
  for _, c in ipairs(counters) do
    put_counter(c, out)
  end
  return table.concat(out)
end

------------------------------------------------------------------- the algorithm (window.rs)

local function find(state, ms, window)
  if state then
    for _, c in ipairs(state) do
      if c.window == window and c.ms == ms then
        return c
      end
    end
  end
  return nil
end

-- The seed's estimate: the same double operations in the same order as window.rs.
local function estimate(w, previous, current, elapsed)
  return floor(previous * ((w - elapsed) / w) + current)
end

-- The counts of counter c in force in window number idx.
local function counts_at(c, idx)
  if c and c.index == idx then
    return c.previous, c.current
  elseif c and c.index + 1 == idx then
    return c.current, 0
  end
  return 0, 0
end

-- One limit judged on its own counter (a clock behind is judged at the counter's window).
local function judge(c, limit, window, now)
  local idx, elapsed = divmod(now, window)
  if c and idx < c.index then
    idx, elapsed = c.index, 0
  end
  local previous, current = counts_at(c, idx)
  return {
    limit = limit, window = window, index = idx, elapsed = elapsed,
    previous = previous, current = current,
    est = estimate(window, previous, current, elapsed),
  }
end

local function allows(j, cost)
  return cost <= j.limit and j.est <= j.limit - cost
end

-- The smallest elapsed in [lo, w) with estimate <= most, or nil. The estimate never
-- rises with elapsed, so the answer is unique and bisection finds it.
local function first_elapsed_at_most(w, previous, current, lo, most)
  if current > most then
    return nil
  end
  if previous < most - current + 1 then
    return lo
  end
  local function ok(e)
    return estimate(w, previous, current, e) <= most
  end
  if not ok(w - 1) then
    return nil
  end
  if ok(lo) then
    return lo
  end
  local bad, good = lo, w - 1
  while good - bad > 1 do
    local mid = bad + floor((good - bad) / 2)
    if ok(mid) then
      good = mid
    else
      bad = mid
    end
  end
  return good
end

-- Whole units from `now` until j's estimate is at most `most` with counts (previous,
-- current) in force at j's time: a big, exact however far off.
local function units_until(j, previous, current, most, now)
  local w = j.window
  local m, e = 0, first_elapsed_at_most(w, previous, current, j.elapsed, most)
  if not e then
    m, e = 1, first_elapsed_at_most(w, current, 0, 0, most)
    if not e then
      m, e = 2, 0
    end
  end
  if m == 0 and e == j.elapsed then
    return { 0, 0 }
  end
  -- (index + m) * w + e - now, differences first: index * w <= 2^53 - 1 is exact.
  local v = big(j.index * w - now)
  for _ = 1, m do
    v = badd(v, big(w))
  end
  return badd(v, big(e))
end

local NEVER = { 1 / 0, 0 } -- sorts after every wait

local function decide(state, req)
  local js, allowed = {}, true
  for i, l in ipairs(req.limits) do
    local j = judge(find(state, req.ms, l.window), l.limit, l.window, req.now)
    js[i] = j
    if not allows(j, req.cost) then
      allowed = false
    end
  end
  local d = { js = js, allowed = allowed, req = req }
  local cost = req.cost

  function d.count_of(j)
    return allowed and j.est + cost or j.est
  end

  function d.retry_of(j) -- nil: allowed by this limit, or never (cost > limit)
    if allows(j, cost) or cost > j.limit then
      return nil
    end
    return units_until(j, j.previous, j.current, j.limit - cost, req.now)
  end

  function d.reset_of(j)
    local current = allowed and j.current + cost or j.current
    return units_until(j, j.previous, current, 0, req.now)
  end

  -- Denied: the denying limit with the longest wait ("never" longest); allowed: the
  -- least remaining. Ties go to the first in call order.
  function d.governing()
    if #js == 1 then
      return 1
    end
    local best, key
    for i, j in ipairs(js) do
      local k
      if allowed then
        k = { -(j.limit - (j.est + cost)), 0 }
      elseif not allows(j, cost) then
        -- Compared as the reply shows them (capped), as the module compares.
        local r = d.retry_of(j)
        k = r and big(bcap(r)) or NEVER
      end
      if k and (best == nil or bless(key, k)) then
        best, key = i, k
      end
    end
    return best or 1
  end

  function d.outcome(j)
    local count = d.count_of(j)
    local r = d.retry_of(j)
    return {
      j.window, j.limit, count, j.limit > count and j.limit - count or 0,
      r and bcap(r) or -1, bcap(d.reset_of(j)),
    }
  end

  return d
end

local function reply(d, details)
  local g = d.js[d.governing()]
  local allowed = d.allowed and 1 or 0
  if not details then
    return { allowed, d.count_of(g) }
  end
  local o = d.outcome(g)
  if #d.js == 1 then
    return { allowed, o[3], o[2], o[4], o[5], o[6] }
  end
  local retry = -1
  if not d.allowed then
    local longest = nil
    for _, j in ipairs(d.js) do
      if not allows(j, d.req.cost) then
        local r = d.retry_of(j)
        if not r then
          longest = false
          break
        end
        if longest == nil or bless(longest, r) then
          longest = r
        end
      end
    end
    retry = longest and bcap(longest) or -1
  end
  local reset = { 0, 0 }
  local each = {}
  for i, j in ipairs(d.js) do
    local r = d.reset_of(j)
    if bless(reset, r) then
      reset = r
    end
    each[i] = d.outcome(j)
  end
  return { allowed, o[3], o[2], o[4], retry, bcap(reset), each }
end

-- When a counter's counts can no longer matter at now_ms (both as bigs in ms): two
-- windows after the start of its newest.
local function newest_ms(c)
  return bmul(badd(big(c.index * c.window), big(c.window)), c.ms and 1 or 1000)
end

local function aged_out(c, now_ms)
  return not bless(now_ms, badd(newest_ms(c), bmul(big(c.window), c.ms and 1 or 1000)))
end

-- Insertion sort: stable, as the module's sort of at most eight counters is.
local function sort(list, less)
  for i = 2, #list do
    local x, k = list[i], i - 1
    while k >= 1 and less(x, list[k]) do
      list[k + 1] = list[k]
      k = k - 1
    end
    list[k + 1] = x
  end
end

-- The key's state after an allowed CHECK, and whether it keeps windows the call did not
-- name: the named windows counted, then the others still of use, newest first, to eight.
local function next_state(state, d)
  local req = d.req
  local out = {}
  for i, j in ipairs(d.js) do
    out[i] = { ms = req.ms, window = j.window, index = j.index,
               current = j.current + req.cost, previous = j.previous }
  end
  local named = #out
  local now_ms = bmul(big(req.now), req.ms and 1 or 1000)
  local others = {}
  for _, c in ipairs(state or {}) do
    local is_named = false
    if c.ms == req.ms then
      for _, l in ipairs(req.limits) do
        if l.window == c.window then
          is_named = true
        end
      end
    end
    if not is_named and not aged_out(c, now_ms) then
      others[#others + 1] = { c = c, newest = newest_ms(c) }
    end
  end
  sort(others, function(a, b) return bless(b.newest, a.newest) end)
  for i = 1, math.min(#others, MAX_WINDOWS - named) do
    out[#out + 1] = others[i].c
  end
  sort(out, before)
  return out, #out > named
end

------------------------------------------------------------------------- the commands

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end

-- The key's counters (nil when missing), or false for a value that is no state. v: GET's
-- reply when already read. A GET refused by ACL is false and its error, not WRONGTYPE.
local function read(key, v)
  if v == nil then
    v = redis.pcall('GET', key)
  end
  if type(v) == 'table' then
    local e = v.err
    return false, e and not strfind(e, '^WRONGTYPE') and v or nil
  end
  if not v then
    return nil
  end
  return decode(v) or false
end

-- The key's absolute expiry in ms, or nil without one; and whether it may be off by a
-- few ms: an integer reply past 2^53 reaches Lua as the nearest double. PEXPIRETIME is
-- 7.0+; Redis 6.2 has only the relative PTTL.
local function expiry(key, now_ms)
  local t = redis.pcall('PEXPIRETIME', key)
  if type(t) ~= 'number' then
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then
      return nil
    end
    return badd(big(now_ms), big(ttl)), ttl > MAX
  end
  if t < 0 then
    return nil
  end
  if t > MAX then
    return big(t), true
  end
  return big(t), false
end

local function failed(r)
  if type(r) == 'table' and r.err then
    return r
  end
end

-- `SET key state PXAT ms` (or plain SET, for a key without expiry): what replicas and
-- the AOF receive. The error (OOM under EVAL, which has no flags to be refused by up
-- front) is returned as the reply.
local function write(key, counters, pxat)
  if pxat then
    return failed(redis.pcall('SET', key, encode(counters), 'PXAT', bdecimal(pxat)))
  end
  return failed(redis.pcall('SET', key, encode(counters)))
end

-- The key's own expiry kept exactly, where Lua cannot read it exactly (past 2^53 ms);
-- with `at`, the later of the two (PEXPIREAT GT, 7.0+).
local function write_keeping(key, counters, at)
  local e = failed(redis.pcall('SET', key, encode(counters), 'KEEPTTL'))
  if e or not at then
    return e
  end
  redis.pcall('PEXPIREAT', key, bdecimal(at), 'GT')
end

------------------------------------------------------------------ the common call, fast

-- `limit window [now]` in seconds, on a key missing or holding just that window: the
-- general path's answer without its tables, closures and bisection (most calls are this
-- one). Few C calls: each string.byte/char/find costs about as much as the arithmetic.

-- ASCII digits, at most hi: the number, else nil (the general parser gives the error).
-- `s + 0` is exact here: digits only, and a value past 2^53 - 1 reads as >= 2^53.
-- Limits and windows repeat from call to call: a table lookup of a string seen before
-- costs a fifth of the pattern match, so the numbers are kept (a bounded few).
local seen, seen_count = {}, 0

local function digits(s, hi)
  local v = seen[s]
  if not v then
    if not strfind(s, '^%d+$') then
      return nil
    end
    v = s + 0
    if seen_count == 256 then
      seen, seen_count = {}, 0
    end
    seen[s], seen_count = v, seen_count + 1
  end
  if v <= hi then
    return v
  end
end

-- A varint at b[k], as read_varint reads it: the value and the next index, or nil.
local function get(b, k, last)
  local v, mul = 0, 1
  for i = k, k + 7 do
    if i > last then
      return nil
    end
    local x = b[i]
    v = v + (x % 128) * mul
    mul = mul * 128
    if x < 128 then
      if (i > k and x == 0) or v > MAX then
        return nil
      end
      return v, i + 1
    end
  end
end

-- A one-counter state in seconds (0xA1, flags 0) as decode reads it: window, index,
-- current, previous; nil for any other value (left to the general path).
local function decode_one(s)
  local n = #s
  if n < 6 or n > 35 then -- 35: the longest one-counter state
    return nil
  end
  local b = { byte(s, 1, n) } -- one C call for all the bytes
  if b[1] ~= 0xA1 or b[2] ~= 0 then
    return nil
  end
  -- One-byte varints (the common window, counts) read inline; longer ones by get.
  local w, k = b[3], 4
  if w >= 128 then
    w, k = get(b, 3, n)
    if not w then
      return nil
    end
  end
  local index, current, previous
  index, k = get(b, k, n)
  if not index then
    return nil
  end
  current = b[k]
  if current and current < 128 then
    k = k + 1
  else
    current, k = get(b, k, n)
    if not current then
      return nil
    end
  end
  previous = b[k]
  if previous and previous < 128 then
    k = k + 1
  else
    previous, k = get(b, k, n)
  end
  -- index * w > MAX is exact: a product past 2^53 - 1 rounds to >= 2^53.
  if not previous or k ~= n + 1 or w == 0 or w > MAX_WINDOW_S or index * w > MAX then
    return nil
  end
  return w, index, current, previous
end

-- put_varint's bytes as a string. Windows and indexes repeat from call to call (every
-- key in a window shares its index): kept, a bounded few, as the numbers above are.
local varints, varint_count = {}, 0

local function varint(v)
  local s = varints[v]
  if not s then
    local out, k, x = {}, 0, v
    while x >= 128 do
      local low = x % 128 -- exact: x < 2^53, 128 a power of two
      k = k + 1
      out[k] = low + 128
      x = (x - low) / 128
    end
    out[k + 1] = x
    s = char(unpack(out, 1, k + 1))
    if varint_count == 256 then
      varints, varint_count = {}, 0
    end
    varints[v], varint_count = s, varint_count + 1
  end
  return s
end

-- What the last call parsed, and met again in the next (strings compare by address).
local last_a1, last_a2, last_limit, last_window -- limit and window: texts, numbers
local last_sec, last_now -- TIME's seconds: text, number
local last_at, last_text -- the last expiry written: number, decimal text
local last_sw, last_sw_text -- the seconds of the last expiry: number, decimal text
local DIGIT = { [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }

-- A state's bytes before its counts: the same for every key counted in the same window
-- and index, so the last one is kept.
local head_window, head_index, head_text
local prev_text -- the same for the window before (nil for index 0): a key not yet counted
                -- in this window, as the last window left it

local function head(window, index)
  if window ~= head_window or index ~= head_index then
    head_window, head_index = window, index
    head_text = '\161\0' .. varint(window) .. varint(index)
    prev_text = index >= 1 and '\161\0' .. varint(window) .. varint(index - 1) or nil
  end
  return head_text
end

-- The replies {1, count} and {0, estimate}, kept for the small counts: Redis only reads
-- a returned table.
local allowed_replies, denied_replies = {}, {}

local function clock_of(t, now) -- TIME's reply, its seconds as a number: the server ms
  if t then
    local us = t[2] + 0 -- coerced by arithmetic (cheaper than tonumber)
    return now * 1000 + (us - us % 1000) / 1000
  end
end

-- CHECK and PEEK: the common call answered here (the least work before it: it is most
-- calls); any other goes to the general path, with the server ms (if read) and GET's
-- reply (if read) to go on from.
local function fast_first(general, writes)
  return function(keys, args)
    if not floor then
      bind()
    end
    if #keys ~= 1 then
      return general(keys, args)
    end
    local key = keys[1]
    local n = #args
    if n ~= 2 and n ~= 3 then
      return general(keys, args)
    end
    local a1, a2 = args[1], args[2]
    local limit, window
    if a1 == last_a1 and a2 == last_a2 then -- the last call's limit and window again
      limit, window = last_limit, last_window
    else
      limit, window = digits(a1, MAX), digits(a2, MAX_WINDOW_S)
      if not limit or not window or window == 0 then
        return general(keys, args)
      end
      last_a1, last_a2, last_limit, last_window = a1, a2, limit, window
    end
    local now, t
    if n == 3 then
      now = digits(args[3], MAX)
      if not now then
        return general(keys, args) -- an option, or a bad now
      end
    else
      -- TIME's seconds text stays the same for a second, and so its number; the
      -- microseconds are read only when needed (a write, or the general path).
      t = rcall('TIME')
      local sec = t[1]
      if sec ~= last_sec then
        last_sec, last_now = sec, sec + 0
      end
      now = last_now
    end
    local v = rpcall('GET', key)
    local index, elapsed
    if now + window <= MAX then -- then now / window cannot round up to the next integer
      elapsed = now % window
      index = (now - elapsed) / window
    else
      index, elapsed = divmod(now, window)
    end
    if window ~= head_window or index ~= head_index then
      head(window, index)
    end
    local hd = head_text
    local previous, current = 0, 0
    if v then
      -- Mostly the key is as a call in this window left it: compare its bytes up to the
      -- counts with those, read the two one-byte counts; otherwise decode it. An error
      -- (WRONGTYPE) is a table, of length 0: decode_one refuses it, the general path
      -- answers it.
      local h = #hd
      local c, p
      if #v == h + 2 and strfind(v, hd, 1, true) == 1 then
        c, p = byte(v, h + 1, h + 2)
      end
      if c and c < 128 and p < 128 then
        previous, current = p, c
      else
        c = nil
        local pt = prev_text
        if pt and #v == #pt + 2 and strfind(v, pt, 1, true) == 1 then
          c, p = byte(v, #pt + 1, #pt + 2)
        end
        if c and c < 128 and p < 128 then -- counted last window: its count is previous
          previous = c
        else
          local w, i
          w, i, c, p = decode_one(v)
          if w ~= window then
            return general(keys, args, clock_of(t, now), v)
          end
          if index < i then -- a clock behind: judged at the counter's window
            index, elapsed = i, 0
            hd = head(window, index)
          end
          if i == index then
            previous, current = p, c
          elseif i + 1 == index then
            previous = c
          end
        end
      end
    end
    local est = current -- estimate(), its floor as y - y % 1 (exact for y >= 0)
    if previous ~= 0 then
      local y = previous * ((window - elapsed) / window) + current
      est = y - y % 1
    end
    if limit < 1 or est > limit - 1 then
      local r = denied_replies[est]
      if not r then
        r = { 0, est }
        if est < 256 then
          denied_replies[est] = r
        end
      end
      return r
    end
    if writes then
      local clock
      if t then
        local us = t[2] + 0 -- coerced by arithmetic (cheaper than tonumber)
        clock = now * 1000 + (us - us % 1000) / 1000
      else
        clock = server_ms()
      end
      current = current + 1
      local state = hd .. (varints[current] or varint(current))
        .. (varints[previous] or varint(previous))
      local at = clock + 2000 * window -- exact whenever it is at most 2^53 - 1
      if at == last_at then -- calls in the same ms with the same window: the same text
        at = last_text
      elseif at <= MAX then
        -- Its decimal: the seconds' (kept: the same for a second) and three digits of ms.
        local ms = clock % 1000
        local sw = (clock - ms) / 1000 + 2 * window
        if sw ~= last_sw then
          last_sw, last_sw_text = sw, format('%d', sw)
        end
        local o = ms % 10
        local t2 = (ms - o) / 10
        local d = t2 % 10
        local c = (t2 - d) / 10
        last_at, last_text = at, last_sw_text .. DIGIT[c] .. DIGIT[d] .. DIGIT[o]
        at = last_text
      else
        local lw = big(window * 1000)
        at = bdecimal(badd(badd(big(clock), lw), lw))
      end
      local e = rpcall('SET', key, state, 'PXAT', at)
      if e.err then -- OOM under EVAL
        return e
      end
    end
    est = est + 1
    local r = allowed_replies[est]
    if not r then
      r = { 1, est }
      if est < 256 then
        allowed_replies[est] = r
      end
    end
    return r
  end
end

local function arity(name)
  return "ERR wrong number of arguments for '" .. name .. "' function"
end

-- The general path; clock and got: the server ms and GET's reply, when fast_first read them.
local function limiter(name, mode)
  return function(keys, args, clock, got)
    bind()
    if #keys ~= 1 then
      return redis.error_reply(arity(name))
    end
    local key = keys[1]
    local req, err = parse_check(args, arity(name))
    if not req then
      return redis.error_reply(err)
    end
    local function ms()
      clock = clock or server_ms()
      return clock
    end
    if not req.now then
      req.now = floor(ms() / (req.ms and 1 or 1000))
    end
    local state, refused = read(key, got)
    if state == false then
      return refused or redis.error_reply(WRONGTYPE)
    end
    local d = decide(state, req)
    if mode == 'check' and d.allowed then
      local longest = 0
      for _, l in ipairs(req.limits) do
        longest = math.max(longest, l.window)
      end
      local lw = big(longest * (req.ms and 1 or 1000))
      local at = badd(badd(big(ms()), lw), lw)
      local counters, kept_others = next_state(state, d)
      local old, inexact
      if kept_others then
        -- Longer windows the call did not name keep their later expiry.
        old, inexact = expiry(key, ms())
        if old and not inexact and bless(at, old) then
          at = old
        end
      end
      local e
      if old and inexact then
        e = write_keeping(key, counters, at)
      else
        e = write(key, counters, at)
      end
      if e then
        return e
      end
    elseif mode == 'refund' and state then
      local changed = false
      for _, l in ipairs(req.limits) do
        for i, c in ipairs(state) do
          if c.ms == req.ms and c.window == l.window then
            local idx = divmod(req.now, c.window)
            if idx < c.index then
              idx = c.index
            end
            local previous, current = counts_at(c, idx)
            local from_cur = math.min(req.cost, current)
            local from_prev = math.min(req.cost - from_cur, previous)
            if from_cur + from_prev > 0 then
              state[i] = { ms = c.ms, window = c.window, index = idx,
                           current = current - from_cur, previous = previous - from_prev }
              changed = true
            end
          end
        end
      end
      if changed then
        local old, inexact = expiry(key, ms())
        local e
        if inexact then
          e = write_keeping(key, state)
        else
          e = write(key, state, old)
        end
        if e then
          return e
        end
        d = decide(state, req)
      end
    end
    return reply(d, req.details)
  end
end

local function counts(keys, args)
  bind()
  local name = 'slidingwindow_counts'
  if #keys ~= 1 then
    return redis.error_reply(arity(name))
  end
  local q, err = parse_counts(args, arity(name))
  if not q then
    return redis.error_reply(err)
  end
  local now = q.now or floor(server_ms() / (q.ms and 1 or 1000))
  local state, refused = read(keys[1])
  if state == false then
    return refused or redis.error_reply(WRONGTYPE)
  end
  local j = judge(find(state, q.ms, q.window), 0, q.window, now)
  return { j.previous, j.current, j.elapsed }
end

local function version()
  return VERSION
end

-- The commands the library calls on Redis 7.0+, with what redis.acl_check_cmd needs to
-- judge each on the key (true: the key goes there): TIME, GET, SET ... PXAT, PEXPIRETIME
-- and PEXPIREAT ... GT (an expiry past 2^53 ms). PTTL is called only where PEXPIRETIME
-- fails (Redis 6.2, which has no acl_check_cmd; or PEXPIRETIME refused, reported here).
local CALLED = {
  { 'time' }, { 'get', true }, { 'set', true, 'x' }, { 'pexpiretime', true },
  { 'pexpireat', true, '0' },
}

-- A diagnostic, never on the limiter's path: the commands above that the calling user may
-- not run on the key, in that order, lower case; empty when every one is granted. A
-- command the server does not know is not reported. Redis 7.0+ / Valkey 7.2+ only.
local function permissions(keys, args)
  bind()
  local name = 'slidingwindow_permissions'
  if #keys ~= 1 or #args ~= 0 then
    return redis.error_reply(arity(name))
  end
  local check = redis.acl_check_cmd
  if not check then
    return redis.error_reply('ERR ' .. name .. ' needs redis.acl_check_cmd (Redis 7.0+)')
  end
  local missing = {}
  for _, c in ipairs(CALLED) do
    local ok, granted
    if c[2] then
      ok, granted = pcall(check, c[1], keys[1], unpack(c, 3))
    else
      ok, granted = pcall(check, c[1])
    end
    if ok and not granted then
      missing[#missing + 1] = c[1]
    end
  end
  return missing
end

local FUNCTIONS = {
  { 'slidingwindow_check', fast_first(limiter('slidingwindow_check', 'check'), true), {} },
  { 'slidingwindow_peek', fast_first(limiter('slidingwindow_peek', 'peek'), false),
    { 'no-writes' } },
  { 'slidingwindow_counts', counts, { 'no-writes' } },
  { 'slidingwindow_refund', limiter('slidingwindow_refund', 'refund'), {} },
  { 'slidingwindow_version', version, { 'no-writes' } },
  { 'slidingwindow_permissions', permissions, { 'no-writes' } },
}

if redis.register_function then
  for i = 1, #FUNCTIONS do
    local f = FUNCTIONS[i]
    redis.register_function { function_name = f[1], callback = f[2], flags = f[3] }
  end
else
  -- EVAL / EVALSHA: ARGV[1] names the function, the rest are its arguments.
  local args = {}
  for i = 2, #ARGV do
    args[i - 1] = ARGV[i]
  end
  for _, f in ipairs(FUNCTIONS) do
    if f[1] == ARGV[1] then
      return f[2](KEYS, args)
    end
  end
  return redis.error_reply("ERR unknown slidingwindow function '" .. tostring(ARGV[1])
    .. "' (the first argument after the keys names it, e.g. slidingwindow_check)")
end
