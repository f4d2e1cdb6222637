
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
-- retry_after_us = -1 for none.

local key = KEYS[1]
local raw = redis.call('GET', key)
local allowed, remaining, reset, retry_after, new, expires_at =
  decide(raw, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[2]))
if allowed == nil then
  return malformed(remaining, key)
end
save(key, raw, new, expires_at, tonumber(ARGV[3]))
return { allowed, remaining, reset, retry_after }
