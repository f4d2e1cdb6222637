-- tollgate: prelude shared by every script (prepended to each one): the
-- clock and the exact integer helpers. A script is this prelude, the
-- strategy files it uses (each defines one decision function, which does
-- not write) and a main part: single.lua for a policy of one limit,
-- compound.lua for several limits decided as one step.
--
-- ARGV[1]  now in microseconds since the Unix epoch, or '' to read the server
--          clock with TIME
--
-- The other arguments and the reply are the main part's.
--
-- Lua numbers are doubles, exact for integers up to 2^53. The binding rejects
-- policies whose arithmetic could leave that range and this prelude rejects
-- clock readings from 2^52 microseconds on (the year 2112), so every value
-- below stays an exact integer. Comparisons use integers only.

local server_clock = ARGV[1] == ''

local now
if server_clock then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
else
  now = tonumber(ARGV[1])
end
if not now or now < 0 or now >= 4503599627370496 then
  return redis.error_reply('TOLLGATE clock reading out of range: ' .. tostring(ARGV[1]))
end

-- The largest time (the clock's bound) and the largest fixed-window count a
-- penalty can reach: states saturate there, so every value stays exact.
local MAX_TIME = 4503599627370496
local MAX_COUNT = 2251799813685248

-- floor(a / b) for integers 0 <= a <= 2^53 and b >= 1. The double quotient
-- is correctly rounded, so its floor is off by at most one; the exact
-- remainder corrects it.
local function floor_div(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- ceil(a / b) for integers 0 <= a <= 2^53 and b >= 1.
local function ceil_div(a, b)
  local q = floor_div(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

-- An integer as decimal digits (tostring would use an exponent).
local function fmt(x)
  return string.format('%.0f', x)
end

-- Parses a stored state of `n` non-negative integers below 2^53 separated
-- by ':'; nil when it is anything else.
local function parse(raw, n)
  local fields = {}
  for field in string.gmatch(raw, '[^:]+') do
    if not string.match(field, '^%d+$') then
      return nil
    end
    local value = tonumber(field)
    if value >= 9007199254740992 then
      return nil
    end
    fields[#fields + 1] = value
  end
  if #fields ~= n then
    return nil
  end
  return fields
end

-- The error for a value under `key` that is not a state of kind `what`.
local function malformed(what, key)
  return redis.error_reply('TOLLGATE malformed ' .. what .. ' state under key ' .. key)
end

-- A blocked key's value is 'B<until>|<state>': the microsecond at which the
-- block ends, then the state as it would be stored unblocked (empty for
-- absent state). Values that start with 'B' are tested for it; no state
-- does. Returns the end of the block and the state (false for none), or nil
-- when `raw` is no such value.
local function split_block(raw)
  local ends, state = string.match(raw, '^B(%d+)|(.*)$')
  if not ends or tonumber(ends) >= 9007199254740992 then
    return nil
  end
  if state == '' then
    state = false
  end
  return tonumber(ends), state
end

-- Stores the state after a decision under `key`, whose value was `old`:
-- deletes the key when the state equals absent state, leaves it alone when
-- unchanged, otherwise writes it with an expiry at `expires_at`
-- (microseconds, rounded up to whole milliseconds) plus `grace_ms`.
local function save(key, old, new, expires_at, grace_ms)
  if new == nil then
    if old then
      redis.call('DEL', key)
    end
    return
  end
  if new == old then
    return
  end
  redis.call('SET', key, new)
  if server_clock then
    redis.call('PEXPIREAT', key, fmt(ceil_div(expires_at, 1000) + grace_ms))
  else
    local ttl = ceil_div(expires_at - now, 1000)
    if ttl < 1 then
      ttl = 1
    end
    redis.call('PEXPIRE', key, fmt(ttl + grace_ms))
  end
end

-- Every strategy file below defines one decision function
-- `f(raw, limit, window, interval, cost)`: `raw` is the stored value (false
-- when the key is absent), L, W and T = max(1, floor(W / L)) in
-- microseconds, and the cost. It returns allowed (0 or 1), remaining,
-- reset_us, retry_after_us (-1 for none), the new state (nil: equal to
-- absent) and the microsecond at which that state expires; or nil and the
-- kind of state when `raw` is not one. It writes nothing.
