-- tollgate: the main part of a policy of one limit. It follows the prelude
-- and the limit's strategy file (the library: every strategy file), and
-- defines `single(decide, KEYS, ARGV)`, which decides by the strategy
-- function `decide`, and `batch(decide, KEYS, ARGV)`, several such
-- decisions in one call.
--
-- KEYS[1]  the state key (one Redis key holds a rate-limit key's whole state)
-- ARGV[2]  the cost (the caller clamps it to L + 1: every larger cost decides
--          exactly alike)
-- ARGV[3]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[4]  L, the limit
-- ARGV[5]  W, the window in microseconds
-- ARGV[6]  T = max(1, floor(W / L)), the emission interval in microseconds
--
-- Returns {allowed (0 or 1), remaining, reset_us, retry_after_us} with
-- retry_after_us = -1 for none; for a blocked key {-1, the microseconds
-- left of the block, the state's reset_us}.

-- Decides `cost` units on the state key `key`, whose value is `raw` (false
-- when absent), by the strategy function `decide` with L, W and T, and
-- saves the state (its expiry `grace_ms` later). Returns allowed,
-- remaining, reset_us, retry_after_us (-1 for none) and the key's value
-- after (false: absent); for a blocked key -1, the microseconds left of
-- the block, the state's reset_us, nil and its value; or false and the
-- error reply for a value that is no state.
local function decide_key(decide, key, raw, cost, limit, window, interval, grace_ms)
  local state = raw
  -- A blocked key (its value starts with 'B'): denied while the block
  -- lasts, its state untouched; an expired block is ignored and dropped by
  -- the next write.
  local blocked_until = nil
  if raw and string.byte(raw, 1) == 66 then
    blocked_until, state = split_block(raw)
    if not blocked_until then
      return false, malformed('blocked', key)
    end
  end
  local blocked = blocked_until and blocked_until > now
  local allowed, remaining, reset, retry_after, new, expires_at =
    decide(state, limit, window, interval, blocked and 0 or cost)
  if allowed == nil then
    return false, malformed(remaining, key)
  end
  if blocked then
    return -1, blocked_until - now, reset, nil, raw
  end
  save(key, raw, new, expires_at, grace_ms)
  return allowed, remaining, reset, retry_after, new or false
end

local function single(decide, KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local allowed, remaining, reset, retry_after = decide_key(decide, KEYS[1], redis.call('GET', KEYS[1]),
    numbers[ARGV[2]] or arg(ARGV[2]),
    numbers[ARGV[4]] or arg(ARGV[4]), numbers[ARGV[5]] or arg(ARGV[5]), numbers[ARGV[6]] or arg(ARGV[6]),
    numbers[ARGV[3]] or arg(ARGV[3]))
  if allowed == false then
    return remaining
  end
  if allowed == -1 then
    return { -1, remaining, reset }
  end
  return { allowed, remaining, reset, retry_after }
end

-- Several decisions of one policy of one limit, each on its own key and
-- deciding only itself, in order (batched calls).
--
-- KEYS[i]      decision i's state key
-- ARGV[2]      milliseconds added to every expiry (grace for caller clocks)
-- ARGV[3 .. 5] L, W and T, as for `single`
-- ARGV[5 + i]  decision i's cost (clamped to L + 1); or ARGV[6] alone, the
--              cost of every decision (the caller sends one when all are
--              equal: one argument less to read per decision)
--
-- Returns four numbers per decision, in order: allowed, remaining,
-- reset_us and retry_after_us (-1 for none); for a blocked key -1, the
-- microseconds left of the block, the state's reset_us and 0.
local function batch(decide, KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local grace_ms = numbers[ARGV[2]] or arg(ARGV[2])
  local limit, window, interval = numbers[ARGV[3]] or arg(ARGV[3]), numbers[ARGV[4]] or arg(ARGV[4]),
    numbers[ARGV[5]] or arg(ARGV[5])
  -- Every value in one read; a key named twice is read back from what the
  -- decision before wrote.
  local raws, written, reply = redis.call('MGET', unpack(KEYS)), {}, {}
  local each = #ARGV > 6
  local cost = numbers[ARGV[6]] or arg(ARGV[6])
  for i = 1, #KEYS do
    local key = KEYS[i]
    local raw = written[key]
    if raw == nil then
      raw = raws[i]
    end
    if each then
      cost = numbers[ARGV[5 + i]] or arg(ARGV[5 + i])
    end
    local allowed, remaining, reset, retry_after, after = decide_key(decide, key, raw,
      cost, limit, window, interval, grace_ms)
    if allowed == false then
      return remaining
    end
    written[key] = after
    local o = 4 * i
    reply[o - 3], reply[o - 2], reply[o - 1], reply[o] = allowed, remaining, reset, retry_after or 0
  end
  return reply
end
