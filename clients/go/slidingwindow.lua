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

Layout, as the module's crates/core: the arguments (args.rs), the bytes (encoding.rs),
the algorithm (window.rs), then the commands (src/commands.rs). One path serves every
call: one limit or several, seconds or MS, with or without DETAILS, COST, REFUND, PEEK.

Arithmetic: Lua numbers are doubles. Every input is at most 2^53 - 1, so it is exact.
The few results that can pass 2^53 (times to wait, expiries in ms, "two windows on") are
checked cheaply first ((index + 3) * window, clock + 2 * window in ms: a sum or product
past 2^53 - 1 rounds to >= 2^53, so the test itself is exact) and only past it computed
as two-part integers (`big`), exactly as the module computes them in u64. Waits in
replies are capped at 2^53 - 1, as the module's are.

Cost: each Lua or C function call costs about as much as twenty lines of arithmetic, and
each table is an allocation the collector must later walk: the common path makes few
calls and builds no table but the reply (and one of the state's bytes to decode them).
]]

local VERSION = '0.3.0'
local MAX = 9007199254740991 -- 2^53 - 1: the largest count, time or window
local MAX_LIMITS = 8
local MAX_WINDOWS = 8
local MAX_WINDOW_S = 9007199254740 -- floor(MAX / 1000): the longest window in seconds
local MAX_LEN = 2 + MAX_WINDOWS * 33 -- the longest state: eight counters of 33 bytes
local TWO32 = 4294967296
local NEVER = 1 / 0 -- a wait that never ends: sorts after every other
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local CHECK_OPTIONS = 'LIMIT, COST, MS or DETAILS'
local ARITY = 'arity' -- parse's word for "too few arguments": the reply names the function

-- Bound by the first call: FUNCTION LOAD runs this body without the standard libraries.
local byte, char, strfind, format, fmod, upper, unpack, typeof, rcall, rpcall, error_reply
local OPTION -- the option words, by their text as written (upper or lower case)

local function bind()
  byte, char, strfind, format = string.byte, string.char, string.find, string.format
  fmod, upper, unpack, typeof = math.fmod, string.upper, _G.unpack, type
  rcall, rpcall, error_reply = redis.call, redis.pcall, redis.error_reply
  OPTION = {}
  for _, w in ipairs({ 'LIMIT', 'COST', 'MS', 'DETAILS' }) do
    OPTION[w], OPTION[string.lower(w)] = w, w
  end
end

--------------------------------------------------------------- per-call state, in one place
--[[
Scratch: module-level arrays that each call fills before it reads them. A call runs to
its end before the next one starts (scripts never yield), so nothing one call leaves in
them is read by another; entries past a call's own count are stale and never read.
  LIM, WIN [1..n]                the call's limits in call order (args.rs Parsed)
  ORDER [1..n]                   their indices by window, as a state holds them
  SMS, SW, SI, SC, SP [1..count] the key's counters as decoded: unit is MS, window,
                                 index, current, previous (window.rs State)
  JS, JI, JE, JP, JC, JX [1..n]  each limit judged (window.rs Judged): its counter's slot
                                 in S (or false), the index and elapsed it is judged at,
                                 the counts in force then, the estimate
  OMS, OW, OI, OC, OP [1..m]     the state an allowed CHECK writes (next_state)
The last parse: parse_check is a pure function of the argument texts, and LIM, WIN and
ORDER are written only by it, so while a call's texts are the last parsed call's (strings
compare by address), its result stands; when only `now` differs, only `now` is read.
  PARGS[1..p_argc]  the texts; p_n, p_ms, p_now, p_cost, p_details: what they gave
                    (p_argc nil: none kept, as after COUNTS, which writes LIM[1], WIN[1])
Caches: each maps a key to what a pure function gives for it, so a stale entry cannot
exist; each is emptied when it reaches 256 entries, so it stays small.
  VARINT[v]      put_varint's bytes of v
  HEAD[k]        a counter's bytes before its counts (flags, window, index) for window k
                 (negative: MS), valid for index HEAD_INDEX[k]; ONE[k] the same after the
                 version byte of a one-counter state (0xA1): what decode looks for first
  REPLY1[c], REPLY0[c]  the replies {1, c} and {0, c} (Redis only reads a returned table)
  last_sec, last_sec_n  TIME's seconds as text and number (it changes once a second)
  last_at, last_at_text an expiry in ms and its decimal (the same for a whole ms)
  last_at_sec, last_at_sec_text  its whole seconds, in ms, and their decimal (then
                        three digits of DIGIT, a constant table, for the ms)
]]
local LIM, WIN, ORDER = {}, {}, {}
local SMS, SW, SI, SC, SP = {}, {}, {}, {}, {}
local JS, JI, JE, JP, JC, JX = {}, {}, {}, {}, {}, {}
local OMS, OW, OI, OC, OP = {}, {}, {}, {}, {}
local PARGS, p_argc, p_n, p_ms, p_now, p_cost, p_details = {}, nil
local VARINT, varint_count = {}, 0
local HEAD, HEAD_INDEX, ONE, head_count = {}, {}, {}, 0
local REPLY1, REPLY0 = {}, {}
local last_sec, last_sec_n, last_at, last_at_text, last_at_sec, last_at_sec_text
local DIGIT = { [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }

------------------------------------------------------------------ two-part integers (rare)

-- Exact integer division of 0 <= a < 2^53 by b >= 1 (a / b alone can round up).
local function divmod(a, b)
  local r = fmod(a, b)
  return (a - r) / b, r
end

local function int(n)
  return format('%d', n)
end

-- {hi, lo}, value hi * 2^32 + lo with 0 <= lo < 2^32: exact to 2^84. Only for values that
-- may pass 2^53 - 1, which the callers test for first.
local function big(n) -- n an exact integer, |n| < 2^53
  local h = (n - n % TWO32) / TWO32
  return { h, n - h * TWO32 }
end

local function badd(a, b)
  local l = a[2] + b[2]
  local c = l >= TWO32 and 1 or 0
  return { a[1] + b[1] + c, l - c * TWO32 }
end

local function bmul(a, k) -- k <= 1000
  local l = a[2] * k
  local c = (l - l % TWO32) / TWO32
  return { a[1] * k + c, l - c * TWO32 }
end

local function bless(a, b) -- a < b
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

local function as_big(x) -- a number < 2^53 or a big
  return typeof(x) == 'table' and x or big(x)
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
    return int(q) .. format('%06d', rl)
  end
  return int(rl)
end

------------------------------------------------------------------ arguments (args.rs)

local function range_err(name, lo, hi, unit)
  return 'ERR ' .. name .. ' must be an integer from ' .. int(lo) .. ' to ' .. int(hi) .. (unit or '')
end

-- A decimal integer in lo..hi: ASCII digits only, else nil. `s + 0` is exact here: digits
-- only, and a value past 2^53 - 1 reads as >= 2^53.
local function int_in(s, lo, hi)
  if strfind(s, '^%d+$') then
    local v = s + 0
    if v >= lo and v <= hi then
      return v
    end
  end
  return nil
end

-- The option word s is (in any case), or nil.
local function option(s)
  local w = OPTION[s]
  if w == nil and #s <= 7 then
    w = OPTION[upper(s)]
  end
  return w
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

-- `[now]` at a[i], right after the window (n: how many arguments): (now or nil, index of
-- the first option), or the error (ARITY when the ones before a[i] are missing).
local function split_now(a, i, n)
  if n < i - 1 then
    return nil, nil, ARITY -- the positional arguments before a[i] are missing
  end
  local s = a[i]
  if s == nil then
    return nil, i
  end
  local now = int_in(s, 0, MAX)
  if now then
    return now, i + 1
  elseif looks_numeric(s) then
    return nil, nil, range_err('now', 0, MAX)
  end
  return nil, i
end

-- Limit k of the call (LIM[k], WIN[k]) from its texts; the error, if any.
local function add_limit(k, l, w, ms)
  if k > MAX_LIMITS then
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
  for j = 1, k - 1 do
    if WIN[j] == window then
      return 'ERR two limits have the same window (' .. int(window) .. ' '
        .. (ms and 'milliseconds' or 'seconds') .. '): give each window once'
    end
  end
  LIM[k], WIN[k] = limit, window
end

-- `limit window [now] [LIMIT limit window]... [COST cost] [MS] [DETAILS]` (parse_into):
-- nil and (limits, ms, now or nil, cost, details), the limits in LIM and WIN; or the error.
local function parse_all(a, n)
  local now, i, e = split_now(a, 3, n)
  if e then
    return e
  end
  -- Every window's bound depends on MS, which may come last: find it first.
  local ms = false
  for j = i, n do
    local o = a[j]
    if #o == 2 and option(o) == 'MS' then
      ms = true
      break
    end
  end
  e = add_limit(1, a[1], a[2], ms)
  if e then
    return e
  end
  local count, cost, seen_ms, details = 1, nil, false, false
  while i <= n do
    local o = option(a[i])
    if o == 'LIMIT' then
      if i + 2 > n then
        return 'ERR LIMIT needs a limit and a window'
      end
      count = count + 1
      e = add_limit(count, a[i + 1], a[i + 2], ms)
      if e then
        return e
      end
      i = i + 3
    elseif o == 'COST' then
      if cost then
        return 'ERR COST given more than once'
      end
      if i + 1 > n then
        return 'ERR COST needs a value'
      end
      cost = int_in(a[i + 1], 1, MAX)
      if not cost then
        return range_err('cost', 1, MAX)
      end
      i = i + 2
    elseif o == 'MS' then
      if seen_ms then
        return 'ERR MS given more than once'
      end
      seen_ms, i = true, i + 1
    elseif o == 'DETAILS' then
      if details then
        return 'ERR DETAILS given more than once'
      end
      details, i = true, i + 1
    else
      return unknown(a[i], CHECK_OPTIONS)
    end
  end
  for k = 1, count do -- ORDER: insertion sort by window (one unit: MS names them all)
    local j = k - 1
    while j >= 1 and WIN[ORDER[j]] > WIN[k] do
      ORDER[j + 1], j = ORDER[j], j - 1
    end
    ORDER[j + 1] = k
  end
  for j = 1, n do
    PARGS[j] = a[j]
  end
  p_argc, p_n, p_ms, p_now, p_cost, p_details = n, count, ms, now, cost or 1, details
  return nil, count, ms, now, cost or 1, details
end

-- parse_all's answer, from the last parse when the texts are the same (see PARGS).
local function parse_check(a)
  local n = #a
  if n ~= p_argc or a[1] ~= PARGS[1] or a[2] ~= PARGS[2] then
    return parse_all(a, n)
  end
  for i = 4, n do
    if a[i] ~= PARGS[i] then
      return parse_all(a, n)
    end
  end
  local s = a[3] -- nil: n < 3, as the last parse's (PARGS past p_argc are stale)
  if s ~= nil and s ~= PARGS[3] then
    local now = p_now and int_in(s, 0, MAX)
    if not now then
      return parse_all(a, n)
    end
    PARGS[3], p_now = s, now
  end
  return nil, p_n, p_ms, p_now, p_cost, p_details
end

-- `window [now] [MS]`: nil and (window, ms, now or nil), or the error.
local function parse_counts(a)
  local now, i, e = split_now(a, 2, #a)
  if e then
    return e
  end
  local ms = false
  for j = i, #a do
    if option(a[j]) ~= 'MS' then
      return unknown(a[j], 'MS')
    end
    if ms then
      return 'ERR MS given more than once'
    end
    ms = true
  end
  local window, err = window_in(a[1], ms)
  if not window then
    return err
  end
  return nil, window, ms, now
end

------------------------------------------------------------------- the bytes (encoding.rs)

-- Whether counter (ams, aw) sorts before (bms, bw): seconds first, then by window.
local function before(ams, aw, bms, bw)
  if ams ~= bms then
    return bms
  end
  return aw < bw
end

-- read_varint: the varint at b[p] and the index past it, or nil: shortest form, at most
-- 8 bytes, at most MAX.
local function varint_at(b, p)
  local x = b[p]
  if x and x < 128 then -- one byte, the most common
    return x, p + 1
  end
  local v, mul, q = 0, 1, p
  while x and x >= 128 and q - p < 7 do
    v, mul, q = v + (x - 128) * mul, mul * 128, q + 1
    x = b[q]
  end
  if not x or x >= 128 or x == 0 then -- a last byte of 0 is overlong
    return nil
  end
  v = v + x * mul -- past 2^53 - 1 it rounds to >= 2^53: refused, exactly
  if v <= MAX then
    return v, q + 1
  end
end

-- decode_into: the number of counters in s, in the S arrays; nil when s is no state
-- (and for an error reply, a table of length 0). One C call reads every byte. Most keys
-- are as a call in this window left them: a version 1 state with the head last written
-- for the call's first window (ONE, below), whose counts are of one or two bytes; then
-- only the counts are read, by one C call, with no table.
local function decode(s, ms, w)
  local n = #s
  if n < 6 or n > MAX_LEN then
    return nil
  end
  local k = ms and -w or w
  local one = ONE[k]
  local h = one and #one -- the head's length
  if h and n - h <= 4 and strfind(s, one, 1, true) == 1 then
    local x1, x2, x3, x4 = byte(s, h + 1, n)
    local c, x, y, q -- current; the bytes after it; the index past it
    if x1 and x1 < 128 then
      c, x, y, q = x1, x2, x3, h + 2
    elseif x2 and x2 < 128 and x2 > 0 then -- a last byte of 0 is overlong
      c, x, y, q = x1 - 128 + x2 * 128, x3, x4, h + 3
    end
    local p
    if x and x < 128 then
      p, q = x, q + 1
    elseif x and y and y < 128 and y > 0 then
      p, q = x - 128 + y * 128, q + 2
    end
    if p and q == n + 1 then
      SMS[1], SW[1], SI[1], SC[1], SP[1] = ms, w, HEAD_INDEX[k], c, p
      return 1
    end
  end
  local b = { byte(s, 1, n) }
  local count, p = 1, 2
  if b[1] == 0xA2 then
    count, p = b[2], 3
    if count < 2 or count > MAX_WINDOWS then
      return nil
    end
  elseif b[1] ~= 0xA1 then
    return nil
  end
  for k = 1, count do -- read_counter: flags and four varints
    local at, flags = p, b[p]
    if flags ~= 0 and flags ~= 1 then
      return nil
    end
    local ms, i, c, q = flags == 1, nil, nil, nil
    local w
    w, p = varint_at(b, p + 1)
    local hk = w and (ms and -w or w)
    local h = HEAD[hk]
    if h and strfind(s, h, at, true) == at then -- flags, window and index as last encoded
      i, p = HEAD_INDEX[hk], at + #h
    elseif w then
      i, p = varint_at(b, p)
    end
    if i then
      c, p = varint_at(b, p)
    end
    if c then
      q, p = varint_at(b, p)
    end
    -- index * w past 2^53 - 1 rounds to >= 2^53: the test is exact
    if not q or w == 0 or w > (ms and MAX or MAX_WINDOW_S) or i * w > MAX
      or (k > 1 and not before(SMS[k - 1], SW[k - 1], ms, w)) then
      return nil
    end
    SMS[k], SW[k], SI[k], SC[k], SP[k] = ms, w, i, c, q
  end
  if p ~= n + 1 then
    return nil
  end
  return count
end

-- put_varint's bytes.
local function varint(v)
  local s = VARINT[v]
  if not s then
    local a = v % 128 -- exact: v < 2^53, 128 a power of two
    local x = (v - a) / 128
    if x == 0 then
      s = char(a)
    elseif x < 128 then
      s = char(a + 128, x)
    else
      local out, k = { a + 128 }, 1
      while x >= 128 do
        local low = x % 128
        k = k + 1
        out[k] = low + 128
        x = (x - low) / 128
      end
      out[k + 1] = x
      s = char(unpack(out, 1, k + 1))
    end
    if varint_count == 256 then
      VARINT, varint_count = {}, 0
    end
    VARINT[v], varint_count = s, varint_count + 1
  end
  return s
end

-- `before` and push_counter's bytes: flags and four varints. The part before the counts
-- is the same for every key counted in one window and index, so it is kept per window.
local function counter_bytes(before, ms, w, i, c, p)
  local k = ms and -w or w
  local h = HEAD[k]
  if HEAD_INDEX[k] ~= i then
    h = (ms and '\1' or '\0') .. varint(w) .. varint(i)
    if head_count == 256 then
      HEAD, HEAD_INDEX, ONE, head_count = {}, {}, {}, 0
    end
    HEAD[k], HEAD_INDEX[k], ONE[k], head_count = h, i, '\161' .. h, head_count + 1
  end
  return before .. h .. (VARINT[c] or varint(c)) .. (VARINT[p] or varint(p))
end

-- encode_into: version 1 for one counter, 2 for several; from the arrays given.
local function encode(count, ms, w, i, c, p)
  if count == 1 then
    return counter_bytes('\161', ms[1], w[1], i[1], c[1], p[1])
  end
  local out = '\162' .. char(count)
  for k = 1, count do
    out = counter_bytes(out, ms[k], w[k], i[k], c[k], p[k])
  end
  return out
end

------------------------------------------------------------------- the algorithm (window.rs)

-- decide's judging: each limit k on its own counter, into the J arrays (in_force,
-- counts_at, estimate); whether every limit allows `cost`. A clock behind a counter's
-- window is judged at the start of that window.
local function judge(count, n, ms, now, cost)
  local allowed = true
  for k = 1, n do
    local w = WIN[k]
    local slot = false
    for s = 1, count do
      if SW[s] == w and SMS[s] == ms then
        slot = s
        break
      end
    end
    local idx, el
    if now + w <= MAX then -- then now / w cannot round up to the next integer
      el = now % w
      idx = (now - el) / w
    else
      idx, el = divmod(now, w)
    end
    local p, c = 0, 0
    if slot then
      local si = SI[slot]
      if idx < si then
        idx, el = si, 0
      end
      if si == idx then
        p, c = SP[slot], SC[slot]
      elseif si + 1 == idx then
        p = SC[slot]
      end
    end
    -- The seed's estimate, the same double operations in the same order; its floor as
    -- y - y % 1 (exact for y >= 0).
    local est = c
    if p ~= 0 then
      local y = p * ((w - el) / w) + c
      est = y - y % 1
    end
    JS[k], JI[k], JE[k], JP[k], JC[k], JX[k] = slot, idx, el, p, c, est
    local limit = LIM[k]
    if cost > limit or est > limit - cost then
      allowed = false
    end
  end
  return allowed
end

local function allows(k, cost)
  return cost <= LIM[k] and JX[k] <= LIM[k] - cost
end

-- The first e in (bad, good] with estimate(e) < top, given it fails at bad and holds at
-- good (the estimate never rises with elapsed).
local function bisect(w, p, c, top, bad, good)
  while good - bad > 1 do
    local mid = bad + (good - bad - (good - bad) % 2) / 2
    if p * ((w - mid) / w) + c < top then
      good = mid
    else
      bad = mid
    end
  end
  return good
end

-- The smallest elapsed in [lo, w) with estimate <= most, or nil. floor(y) <= most is
-- y < most + 1 (exact: most + 1 <= 2^53). In exact arithmetic the answer is
-- e > (p - headroom) * w / p; doubles may round that a step either way, so the guess is
-- checked at itself and one step before, and bisection settles it if it is off.
local function first_elapsed_at_most(w, p, c, lo, most)
  if c > most then
    return nil -- the weighted part only shrinks; `current` stays all window long
  end
  local headroom = most + 1 - c
  if p < headroom then
    return lo -- the estimate is at most p + c <= most all window long
  end
  local top = most + 1
  local x = (p - headroom) * w / p
  local guess = x - x % 1 + 1
  if guess < lo then
    guess = lo
  elseif guess > w - 1 then
    guess = w - 1
  end
  if p * ((w - guess) / w) + c < top then
    if guess == lo or not (p * ((w - guess + 1) / w) + c < top) then
      return guess
    end
    if p * ((w - lo) / w) + c < top then
      return lo
    end
    return bisect(w, p, c, top, lo, guess - 1)
  end
  if guess == w - 1 or not (p * (1 / w) + c < top) then
    return nil
  end
  return bisect(w, p, c, top, guess, w - 1)
end

-- (idx + m) * w + e - now exactly, capped at 2^53 - 1: units_until past 2^53.
local function far_units(idx, w, m, e, now)
  local v = badd(big(idx * w - now), big(e))
  for _ = 1, m do
    v = badd(v, big(w))
  end
  return bcap(v)
end

-- Whole units from `now` until limit k's estimate is at most `most` given counts (p, c)
-- in force at its judged time (first_time_at_most), capped at 2^53 - 1.
local function units_until(k, p, c, most, now)
  local w, idx, el = WIN[k], JI[k], JE[k]
  local m, e = 0, c <= most and first_elapsed_at_most(w, p, c, el, most)
  if not e then
    m, e = 1, first_elapsed_at_most(w, c, 0, 0, most) -- next window: current is previous
    if not e then
      m, e = 2, 0 -- two windows on, both counts have aged out
    end
  end
  if m == 0 and e == el then
    return 0
  end
  if (idx + 3) * w <= MAX then -- every term and sum below is exact
    return idx * w - now + m * w + e
  end
  return far_units(idx, w, m, e, now)
end

-- retry_after_of: nil when limit k alone allows the call, or never can (cost > limit).
local function retry_of(k, cost, now)
  local limit = LIM[k]
  if cost > limit or JX[k] <= limit - cost then
    return nil
  end
  return units_until(k, JP[k], JC[k], limit - cost, now) -- denied: nothing was written
end

-- What limit k reports: window, limit, count, remaining, retry (-1: none; every limit
-- allows an allowed call), reset.
local function outcome(k, allowed, cost, now)
  local limit, count = LIM[k], allowed and JX[k] + cost or JX[k]
  return WIN[k], limit, count, limit > count and limit - count or 0,
    not allowed and retry_of(k, cost, now) or -1,
    units_until(k, JP[k], allowed and JC[k] + cost or JC[k], 0, now)
end

-- Denied: the denying limit with the longest wait ("never" longest); allowed: the one
-- with the least remaining. Ties go to the first in call order; waits are compared as
-- the reply shows them (capped), as the module compares.
local function governing(n, allowed, cost, now)
  local best, key = 1, nil
  for k = 1, n do
    local x
    if allowed then
      x = JX[k] + cost - LIM[k]
    elseif not allows(k, cost) then
      x = retry_of(k, cost, now) or NEVER
    end
    if x and (key == nil or x > key) then
      best, key = k, x
    end
  end
  return best
end

-- Several limits: the longest wait of those that deny (-1 if one never allows).
local function retry_after(n, cost, now)
  local longest = -1
  for k = 1, n do
    if not allows(k, cost) then
      local r = retry_of(k, cost, now)
      if not r then
        return -1
      end
      if r > longest then
        longest = r
      end
    end
  end
  return longest
end

-- The reply: {allowed, count}; with DETAILS {allowed, count, limit, remaining, retry,
-- reset} and, for several limits, each limit's outcome as a seventh element.
local function reply(n, allowed, cost, now, details)
  local g = n == 1 and 1 or governing(n, allowed, cost, now)
  local a = allowed and 1 or 0
  if not details then
    local count, cache = JX[g], REPLY0
    if allowed then
      count, cache = count + cost, REPLY1
    end
    local r = cache[count]
    if not r then
      r = { a, count }
      if count < 256 then
        cache[count] = r
      end
    end
    return r
  end
  if n == 1 then
    local _, limit, count, remaining, retry, reset = outcome(1, allowed, cost, now)
    return { a, count, limit, remaining, retry, reset }
  end
  local each, reset = {}, 0
  for k = 1, n do
    local o = { outcome(k, allowed, cost, now) }
    if o[6] > reset then
      reset = o[6]
    end
    each[k] = o
  end
  local o = each[g]
  return { a, o[3], o[2], o[4], allowed and -1 or retry_after(n, cost, now), reset, each }
end

-- When stored counter s can no longer matter at now_ms (both in ms, as bigs): two
-- windows after the start of its newest. Only for windows the call does not name.
local function newest_ms(s)
  return bmul(badd(big(SI[s] * SW[s]), big(SW[s])), SMS[s] and 1 or 1000)
end

local function aged_out(s, now_ms)
  return not bless(now_ms, badd(newest_ms(s), bmul(big(SW[s]), SMS[s] and 1 or 1000)))
end

-- next_state_into: the state after an allowed CHECK, in the O arrays: the named windows
-- counted, then the others still of use, newest first, to eight, sorted by (unit,
-- window). Its size, and whether it keeps windows the call did not name.
local function next_state(count, n, ms, now, cost)
  local held = 0 -- how many of the stored counters the call names
  for j = 1, n do -- the named windows, in their order (ORDER)
    local k = ORDER[j]
    OMS[j], OW[j], OI[j], OC[j], OP[j] = ms, WIN[k], JI[k], JC[k] + cost, JP[k]
    held = JS[k] and held + 1 or held
  end
  if held == count then
    return n, false -- no other window to keep, and sorted already
  end
  local m, others = n, nil
  for s = 1, count do
    local named = false
    for k = 1, n do
      named = named or JS[k] == s
    end
    if not named then
      others = others or { now_ms = bmul(big(now), ms and 1 or 1000), newest = {} }
      if not aged_out(s, others.now_ms) then
        others[#others + 1], others.newest[s] = s, newest_ms(s)
      end
    end
  end
  if others then
    for i = 2, #others do -- insertion sort, newest first: stable, as the module's
      local x, j = others[i], i - 1
      while j >= 1 and bless(others.newest[others[j]], others.newest[x]) do
        others[j + 1], j = others[j], j - 1
      end
      others[j + 1] = x
    end
    for i = 1, math.min(#others, MAX_WINDOWS - n) do
      local s = others[i]
      m = m + 1
      OMS[m], OW[m], OI[m], OC[m], OP[m] = SMS[s], SW[s], SI[s], SC[s], SP[s]
    end
  end
  for i = 2, m do -- by (unit, window)
    local xms, xw, xi, xc, xp, j = OMS[i], OW[i], OI[i], OC[i], OP[i], i - 1
    while j >= 1 and ((not xms and OMS[j]) or (xms == OMS[j] and xw < OW[j])) do -- before
      OMS[j + 1], OW[j + 1], OI[j + 1], OC[j + 1], OP[j + 1] = OMS[j], OW[j], OI[j], OC[j], OP[j]
      j = j - 1
    end
    OMS[j + 1], OW[j + 1], OI[j + 1], OC[j + 1], OP[j + 1] = xms, xw, xi, xc, xp
  end
  return m, m > n
end

-- refund: gives `cost` back in each named window the key holds, newest count first, as
-- judged (the J arrays), into the S arrays. Whether anything was given back.
local function give_back(n, cost)
  local changed = false
  for k = 1, n do
    local s = JS[k]
    if s then
      local c, p = JC[k], JP[k]
      local from_c = c < cost and c or cost
      local from_p = p < cost - from_c and p or cost - from_c
      if from_c + from_p > 0 then
        SI[s], SC[s], SP[s], changed = JI[k], c - from_c, p - from_p, true
      end
    end
  end
  return changed
end

------------------------------------------------------------------------- the commands

-- The server's time: now in seconds or, with ms, in ms; and the time in ms when ms or
-- `want_clock` asks for it (now in seconds alone reads no microseconds).
local function server_time(ms, want_clock)
  local t = rcall('TIME')
  local sec = t[1]
  if sec ~= last_sec then
    last_sec, last_sec_n = sec, sec + 0
  end
  if not (ms or want_clock) then
    return last_sec_n
  end
  local us = t[2] + 0 -- coerced by arithmetic (cheaper than tonumber)
  local clock = last_sec_n * 1000 + (us - us % 1000) / 1000
  return ms and clock or last_sec_n, clock
end

local function server_ms()
  local _, clock = server_time(true)
  return clock
end

-- The reply for GET's reply v when it is no state: the error itself when GET was
-- refused (ACL), else WRONGTYPE.
local function no_state(v)
  if typeof(v) == 'table' and v.err and not strfind(v.err, '^WRONGTYPE') then
    return v
  end
  return error_reply(WRONGTYPE)
end

-- The key's absolute expiry in ms: a number, or a big past 2^53 - 1 (read exactly from
-- PTTL), or nil without one; and whether it may be off by a few ms (an integer reply
-- past 2^53 reaches Lua as the nearest double). PEXPIRETIME is 7.0+; 6.2 has only PTTL.
local function expiry(key, now_ms)
  local t = rpcall('PEXPIRETIME', key)
  if typeof(t) ~= 'number' then
    local ttl = rcall('PTTL', key)
    if ttl < 0 then
      return nil
    elseif now_ms + ttl <= MAX then
      return now_ms + ttl, false
    end
    return badd(big(now_ms), big(ttl)), ttl > MAX
  end
  if t < 0 then
    return nil
  end
  return t, t > MAX
end

-- An expiry's decimal (a number <= 2^53 - 1). The last one is kept: calls in one ms
-- with one window share it; and the decimal of its seconds, which last a second.
local function ms_text(at)
  if at ~= last_at then
    local ms = at % 1000
    local sec = at - ms
    if sec ~= last_at_sec then
      last_at_sec, last_at_sec_text = sec, int(sec / 1000)
    end
    local o = ms % 10
    local d = (ms - o) / 10 % 10
    last_at, last_at_text = at, sec == 0 and int(ms)
      or last_at_sec_text .. DIGIT[(ms - ms % 100) / 100] .. DIGIT[d] .. DIGIT[o]
  end
  return last_at_text
end

local function text_of(at) -- an expiry that may be a big
  return typeof(at) == 'table' and bdecimal(at) or ms_text(at)
end

-- `SET key state PXAT ms` (or plain SET, for a key without expiry): what replicas and
-- the AOF receive. The error (OOM under EVAL, which has no flags to be refused by up
-- front) is returned as the reply.
local function write(key, state, text)
  local e
  if text then
    e = rpcall('SET', key, state, 'PXAT', text)
  else
    e = rpcall('SET', key, state)
  end
  if e.err then
    return e
  end
end

-- The key's own expiry kept exactly, where Lua cannot read it exactly (past 2^53 ms);
-- with `at`, the later of the two (PEXPIREAT GT, 7.0+).
local function write_keeping(key, state, at)
  local e = rpcall('SET', key, state, 'KEEPTTL')
  if e.err or not at then
    return e.err and e or nil
  end
  rpcall('PEXPIREAT', key, text_of(at), 'GT')
end


-- An allowed CHECK's write: the next state, expiring two of its longest windows after
-- the server's time; one that keeps windows the call did not name keeps a later expiry.
local function write_counted(key, count, n, ms, now, cost, clock)
  local longest = WIN[1]
  for k = 2, n do
    if WIN[k] > longest then
      longest = WIN[k]
    end
  end
  local lw = longest * (ms and 1 or 1000)
  local at, text = clock + 2 * lw, last_at_text
  if at > MAX then
    at = badd(badd(big(clock), big(lw)), big(lw))
    text = bdecimal(at)
  elseif at ~= last_at then
    text = ms_text(at)
  end
  if n == 1 and (count == 0 or (count == 1 and JS[1] == 1)) then -- next_single
    local k, c, p = ms and -longest or longest, JC[1] + cost, JP[1]
    local state -- ONE[k] when it is this index's: counter_bytes' answer, without its call
    if HEAD_INDEX[k] == JI[1] then
      state = ONE[k] .. (VARINT[c] or varint(c)) .. (VARINT[p] or varint(p))
    else
      state = counter_bytes('\161', ms, longest, JI[1], c, p)
    end
    local e = rpcall('SET', key, state, 'PXAT', text)
    return e.err and e or nil
  end
  local m, kept = next_state(count, n, ms, now, cost)
  local state = encode(m, OMS, OW, OI, OC, OP)
  if not kept then
    return write(key, state, text)
  end
  local old, inexact = expiry(key, clock)
  if old and inexact then
    return write_keeping(key, state, at)
  elseif old and bless(as_big(at), as_big(old)) then
    at = old
  end
  return write(key, state, text_of(at))
end

local function arity(name)
  return "ERR wrong number of arguments for '" .. name .. "' function"
end

-- The error reply of a call with the wrong keys (checked first) or arguments.
local function refuse(name, keys, err)
  if #keys ~= 1 or err == ARITY then
    return error_reply(arity(name))
  end
  return error_reply(err)
end

-- CHECK, PEEK and REFUND: parse, read the key, judge, write what the mode writes, reply.
local function limiter(name, mode)
  local writes = mode == 'check' -- an allowed call counts, and writes an expiry
  return function(keys, a)
    if not rcall then
      bind()
    end
    local err, n, ms, now, cost, details = parse_check(a)
    if err or #keys ~= 1 then
      return refuse(name, keys, err)
    end
    local clock -- the server's time in ms, once read (a CHECK's write needs it)
    if not now then
      now, clock = server_time(ms, writes)
    end
    local key = keys[1]
    local v, count = rpcall('GET', key), 0
    if v then
      count = decode(v, ms, WIN[1])
      if not count then
        return no_state(v)
      end
    end
    local allowed = judge(count, n, ms, now, cost)
    if writes then
      if allowed then
        local e = write_counted(key, count, n, ms, now, cost, clock or server_ms())
        if e then
          return e
        end
      end
    elseif mode == 'refund' and give_back(n, cost) then
      -- The key's own expiry kept, as the module keeps it (Expiry::Keep): exact, even
      -- past 2^53 ms, with no read of it.
      local e = write_keeping(key, encode(count, SMS, SW, SI, SC, SP))
      if e then
        return e
      end
      allowed = judge(count, n, ms, now, cost)
    end
    return reply(n, allowed, cost, now, details)
  end
end

local function counts(keys, a)
  if not rcall then
    bind()
  end
  local err, window, ms, now = parse_counts(a)
  if err or #keys ~= 1 then
    return refuse('slidingwindow_counts', keys, err)
  end
  now = now or server_time(ms)
  local v, count = rpcall('GET', keys[1]), 0
  if v then
    count = decode(v, ms, window)
    if not count then
      return no_state(v)
    end
  end
  LIM[1], WIN[1], p_argc = 0, window, nil
  judge(count, 1, ms, now, 1)
  return { JP[1], JC[1], JE[1] }
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
  if not rcall then
    bind()
  end
  local name = 'slidingwindow_permissions'
  if #keys ~= 1 or #args ~= 0 then
    return error_reply(arity(name))
  end
  local check = redis.acl_check_cmd
  if not check then
    return error_reply('ERR ' .. name .. ' needs redis.acl_check_cmd (Redis 7.0+)')
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
  { 'slidingwindow_check', limiter('slidingwindow_check', 'check'), {} },
  { 'slidingwindow_peek', limiter('slidingwindow_peek', 'peek'), { 'no-writes' } },
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
