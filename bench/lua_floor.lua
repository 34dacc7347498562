#!lua name=swfloor
-- The floor of bench/lua_paths.py: the least that any Functions library keeping the
-- module's contract makes Redis do on each path. Each function makes the server calls its
-- path needs (TIME for the server's clock, GET for the state, SET ... PXAT for a CHECK's
-- write, SET ... KEEPTTL for a REFUND's), writes a constant state of the real length and
-- returns a constant reply of the path's shape. It parses, decodes, judges and encodes
-- nothing, and calls no Lua function of its own: a lower bound to read the library's
-- rows against, not a limiter.
local ONE = '\161\0\144\28\186\186\30\1\0\10' -- a one-counter state (10 bytes)
local THREE = '\162\3\0\1\218\152\204\216\6\1\0\0\60\206\179\163\14\1\0\0\144\28\186\186\30\1\0\10'
local AT = '99999999999999' -- SET's PXAT: a constant, so no decimal is made

local function plain(keys)
  redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], ONE, 'PXAT', AT)
  return { 1, 1 }
end

local function details(keys)
  redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], ONE, 'PXAT', AT)
  return { 1, 1, 1000000, 999999, -1, 3600 }
end

local function three(keys)
  redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], THREE, 'PXAT', AT)
  return { 1, 1, 1000000, 999999, -1, 3600, {
    { 3600, 1000000, 1, 999999, -1, 3600 },
    { 60, 1000000, 1, 999999, -1, 60 },
    { 1, 1000000, 1, 999999, -1, 1 },
  } }
end

local function refund(keys)
  redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], ONE, 'KEEPTTL')
  return { 1, 1 }
end

local function peek(keys)
  redis.call('TIME')
  redis.call('GET', keys[1])
  return { 1, 1, 1000000, 999999, -1, 3600 }
end

redis.register_function('swfloor_plain', plain)
redis.register_function('swfloor_details', details)
redis.register_function('swfloor_three', three)
redis.register_function('swfloor_refund', refund)
redis.register_function { function_name = 'swfloor_peek', callback = peek, flags = { 'no-writes' } }
