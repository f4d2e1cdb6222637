-- tollgate: the main part of a policy of one limit. It follows the prelude
-- and the limit's strategy file (the library: every strategy file), and
-- defines `single(decide, KEYS, ARGV)`, which decides by the strategy
-- function `decide`.
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

local function single(decide, KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local key = KEYS[1]
  local raw = redis.call('GET', key)
  local state = raw
  -- A blocked key (its value starts with 'B'): denied while the block
  -- lasts, its state untouched; an expired block is ignored and dropped by
  -- the next write.
  local blocked_until = nil
  if raw and string.byte(raw, 1) == 66 then
    blocked_until, state = split_block(raw)
    if not blocked_until then
      return malformed('blocked', key)
    end
  end
  local blocked = blocked_until and blocked_until > now
  local allowed, remaining, reset, retry_after, new, expires_at =
    decide(state, numbers[ARGV[4]] or arg(ARGV[4]), numbers[ARGV[5]] or arg(ARGV[5]),
      numbers[ARGV[6]] or arg(ARGV[6]), blocked and 0 or numbers[ARGV[2]] or arg(ARGV[2]))
  if allowed == nil then
    return malformed(remaining, key)
  end
  if blocked then
    return { -1, blocked_until - now, reset }
  end
  save(key, raw, new, expires_at, numbers[ARGV[3]] or arg(ARGV[3]))
  return { allowed, remaining, reset, retry_after }
end

