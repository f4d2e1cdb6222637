-- tollgate: prelude shared by every script and by the function library:
-- the clock and the exact integer helpers. Every file after it defines
-- local functions only: each strategy file one decision function, which
-- does not write, and each main part one entry point taking the keys and
-- the arguments: single.lua for a policy of one limit, compound.lua for
-- several limits decided as one step, operate.lua for per-key operations.
-- The function library registers the entry points once (library.lua); a
-- script for EVAL ends with a line that calls one.
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

-- LIBRARY, defined before this prelude, is true in the function library
-- (loaded once per server) and false in a script (run whole on every call).

-- The decision's time in microseconds and whether it is the server's
-- (TIME), set by `read_clock` at the start of every entry point. A loaded
-- library keeps these between calls; every call sets them first.
local now, server_clock

-- Sets `now` from the first argument; returns an error reply when it is out
-- of range, nil otherwise.
local function read_clock(text)
  server_clock = text == ''
  if server_clock then
    local time = redis.call('TIME')
    -- TIME's fields are digits: arithmetic reads them as tonumber does,
    -- without its call.
    now = time[1] * 1000000 + time[2]
  else
    now = tonumber(text)
  end
  if not now or now < 0 or now >= 4503599627370496 then
    return redis.error_reply('TOLLGATE clock reading out of range: ' .. tostring(text))
  end
  return nil
end

-- The numbers of the arguments a policy repeats on every call (L, W, T, the
-- grace, the cost), by their text. tonumber costs about as much as a short
-- Redis command; a loaded library (LIBRARY) keeps up to 1024 of them from
-- call to call, read as `numbers[text] or arg(text)`, and starts afresh
-- when full. A script starts with none on every call.
local numbers, counted = {}, 0

-- The number `text` reads as (nil for none), kept in `numbers`.
local function arg(text)
  local value = tonumber(text)
  if value and LIBRARY then
    if counted >= 1024 then
      numbers, counted = {}, 0
    end
    numbers[text] = value
    counted = counted + 1
  end
  return value
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

-- An integer as decimal digits (tostring would use an exponent; '%d'
-- converts to a 64-bit integer first, exact below 2^53, and is cheaper than
-- '%.0f').
local function fmt(x)
  return string.format('%d', x)
end

-- A stored number: a non-negative integer below 2^53 as tonumber reads it
-- (the scripts write decimal digits; an exponent, a point or hexadecimal
-- digits of such an integer read alike), nil for anything else. Cheaper
-- than matching a pattern.
local function number(text)
  local value = tonumber(text)
  if value and value >= 0 and value < 9007199254740992 and value % 1 == 0 then
    return value
  end
  return nil
end

-- The error for a value under `key` that is not a state of kind `what`.
local function malformed(what, key)
  if what == 'calendar-span' then
    return redis.error_reply('TOLLGATE the server clock is outside the calendar periods sent, under key ' .. key)
  end
  return redis.error_reply('TOLLGATE malformed ' .. what .. ' state under key ' .. key)
end

-- A blocked key's value is 'B<until>|<state>': the microsecond at which the
-- block ends, then the state as it would be stored unblocked (empty for
-- absent state). Values that start with 'B' (byte 66) are tested for it; no
-- state does. Returns the end of the block and the state (false for none),
-- or nil when `raw` is no such value.
local function split_block(raw)
  local bar = string.find(raw, '|', 2, true)
  if not bar then
    return nil
  end
  local ends = number(string.sub(raw, 2, bar - 1))
  if not ends then
    return nil
  end
  local state = string.sub(raw, bar + 1)
  if state == '' then
    state = false
  end
  return ends, state
end

-- The expiry text of the last write on the server's clock and what it was
-- made from: every key of a fixed window's bucket expires at the bucket's
-- end, so a batch of them writes one text.
local saved_expiry, saved_grace, saved_at

-- Stores the state after a decision under `key`, whose value was `old`:
-- deletes the key when the state equals absent state, leaves it alone when
-- unchanged (`new` is then `old` itself), otherwise writes it with an
-- expiry at `expires_at`
-- (microseconds, rounded up to whole milliseconds) plus `grace_ms`: one
-- SET with PXAT on the server's clock in the library (Redis 7; a script
-- sends SET and PEXPIREAT, which Redis 5 knows), with PX on a caller's
-- clock. Numbers are written with fmt: cheaper than letting Redis convert
-- them.
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
  if server_clock then
    if expires_at ~= saved_expiry or grace_ms ~= saved_grace then
      -- ceil_div(expires_at, 1000), inlined: a correctly rounded quotient
      -- is off by at most one.
      local at = math.ceil(expires_at / 1000)
      if at * 1000 < expires_at then
        at = at + 1
      elseif (at - 1) * 1000 >= expires_at then
        at = at - 1
      end
      saved_expiry, saved_grace, saved_at = expires_at, grace_ms, fmt(at + grace_ms)
    end
    if LIBRARY then
      redis.call('SET', key, new, 'PXAT', saved_at)
    else
      redis.call('SET', key, new)
      redis.call('PEXPIREAT', key, saved_at)
    end
  else
    local ttl = ceil_div(expires_at - now, 1000)
    if ttl < 1 then
      ttl = 1
    end
    redis.call('SET', key, new, 'PX', fmt(ttl + grace_ms))
  end
end

-- Sets the expiry of the two keys `a` and `b` kept beside a state key (a
-- permit's or a hold's set and its hash) to `ends` (microseconds, rounded
-- up to whole milliseconds) plus `grace_ms`: at that instant on the
-- server's clock, after that long (at least a millisecond) on a caller's.
local function expire_beside(a, b, ends, grace_ms)
  if server_clock then
    local ms = fmt(ceil_div(ends, 1000) + grace_ms)
    redis.call('PEXPIREAT', a, ms)
    redis.call('PEXPIREAT', b, ms)
  else
    local ms = fmt(math.max(ceil_div(math.max(ends - now, 0), 1000), 1) + grace_ms)
    redis.call('PEXPIRE', a, ms)
    redis.call('PEXPIRE', b, ms)
  end
end

-- Every strategy file below defines one decision function
-- `f(raw, limit, window, interval, cost)`: `raw` is the stored value (false
-- when the key is absent), L, W and T = max(1, floor(W / L)) in
-- microseconds, and the cost. It returns allowed (0 or 1), remaining,
-- reset_us, retry_after_us (-1 for none), the new state (nil: equal to
-- absent) and the microsecond at which that state expires; or nil and the
-- kind of state when `raw` is not one. It writes nothing.

