
-- tollgate: the main part of a policy of one limit. It follows the prelude,
-- the limit's strategy file and a line that names that file's function
-- `decide`.
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

local key = KEYS[1]
local raw = redis.call('GET', key)
local state = raw
local limit, window, interval = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
-- A blocked key (its value starts with 'B'): denied while the block lasts,
-- its state untouched; an expired block is ignored and dropped by the next
-- write.
local blocked_until = nil
if raw and string.byte(raw, 1) == 66 then
  blocked_until, state = split_block(raw)
  if not blocked_until then
    return malformed('blocked', key)
  end
end
local allowed, remaining, reset, retry_after, new, expires_at =
  decide(state, limit, window, interval, blocked_until and blocked_until > now and 0 or tonumber(ARGV[2]))
if allowed == nil then
  return malformed(remaining, key)
end
if blocked_until and blocked_until > now then
  return { -1, blocked_until - now, reset }
end
save(key, raw, new, expires_at, tonumber(ARGV[3]))
return { allowed, remaining, reset, retry_after }
