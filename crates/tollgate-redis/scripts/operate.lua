
-- tollgate: a per-key operation (reset, block, refund or penalty) on every
-- limit of a policy, one or several, as one atomic step. It follows the
-- prelude and every strategy file, and defines `operate(KEYS, ARGV)`.
--
-- KEYS[i]  limit i's state key (several share one hash slot)
-- KEYS[n + 1 ..]  more keys of the rate-limit key, in the same slot, that
--          a reset deletes too: a concurrency limit's permits (permits.lua)
-- ARGV[2]  the amount: the cost of a refund or penalty (at most 2^51), the
--          length of a block in microseconds
-- ARGV[3]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[4 * i .. 4 * i + 3]  limit i: its strategy function, L, W and T
-- ARGV[4 * n + 4]  the operation: reset, block, refund or penalty
--
-- Ports SEMANTICS.md "Per-key operations": reset deletes every key (ending
-- a block); refund and penalty change each limit's state as the core's
-- pure functions do and keep a running block; block(d) ends at now + d for
-- every limit (d = 0 lifts it) and keeps the state, as a peek brings it
-- forward. A blocked value is 'B<until>|<state>' and expires at the later of
-- the state's expiry and the block's end. Nothing is written unless every
-- value parses. A concurrency limit ('concurrency') keeps no state under
-- its state key, only a block: a refund or a penalty changes nothing, and
-- a reset deletes its permits with the other keys. The number of limits n
-- is read from the arguments (four per limit). Returns {0}.

-- A concurrency limit's state key holds nothing but a block: a peek finds
-- nothing stored and an adjustment stores nothing.
local function concurrency(raw, limit)
  return 1, limit, 0, -1, nil, 0
end
local function concurrency_adjust()
  return nil, 0
end

local peeks = {
  fixed_window = fixed_window,
  sliding_window = sliding_window,
  gcra = gcra,
  concurrency = concurrency,
}
local adjusts = {
  fixed_window = fixed_window_adjust,
  sliding_window = sliding_window_adjust,
  gcra = gcra_adjust,
  concurrency = concurrency_adjust,
}
local signs = { refund = -1, penalty = 1, block = 0 }

local function operate(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = (#ARGV - 4) / 4
  local op = ARGV[4 * n + 4]
  if op == 'reset' then
    redis.call('DEL', unpack(KEYS))
    return { 0 }
  end
  local sign = signs[op]
  if not sign then
    return redis.error_reply('TOLLGATE unknown operation ' .. tostring(op))
  end
  local amount = tonumber(ARGV[2])

  local raws, values, expiries = {}, {}, {}
  for i = 1, n do
    local name = ARGV[4 * i]
    if not peeks[name] then
      return redis.error_reply('TOLLGATE unknown strategy function ' .. tostring(name))
    end
    local limit, window, interval = tonumber(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3])
    local raw = redis.call('GET', KEYS[i])
    local state, ends = raw, nil
    if raw and string.byte(raw, 1) == 66 then
      ends, state = split_block(raw)
      if not ends then
        return malformed('blocked', KEYS[i])
      end
    end
    local new, expires_at
    if op == 'block' then
      ends = now + amount
      local allowed, what, reset, retry_after
      allowed, what, reset, retry_after, new, expires_at = peeks[name](state, limit, window, interval, 0)
      if allowed == nil then
        return malformed(what, KEYS[i])
      end
    else
      new, expires_at = adjusts[name](state, limit, window, interval, sign * amount)
      if new == false then
        return malformed(expires_at, KEYS[i])
      end
    end
    if ends and ends > now then
      expires_at = new and math.max(expires_at, ends) or ends
      new = 'B' .. fmt(ends) .. '|' .. (new or '')
    end
    raws[i], values[i], expiries[i] = raw, new, expires_at
  end

  local grace_ms = tonumber(ARGV[3])
  for i = 1, n do
    save(KEYS[i], raws[i], values[i], expiries[i], grace_ms)
  end
  return { 0 }
end

