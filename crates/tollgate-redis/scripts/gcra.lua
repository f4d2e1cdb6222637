
-- tollgate: the generic cell rate algorithm shared by the token bucket and
-- the leaky-bucket meter. State: "tat", the theoretical arrival time at which
-- the bucket is back to fresh. Port of crates/tollgate/src/strategy/gcra.rs.
-- t = max(tat, now), the time the bucket is at (now for absent state);
-- nil when `raw` is not a bucket state.
local function gcra_time(raw)
  if not raw then
    return now
  end
  local s = parse(raw, 1)
  return s and math.max(s[1], now)
end

local function gcra(raw, limit, window, interval, cost)
  local t = gcra_time(raw)
  if not t then
    return nil, 'bucket'
  end

  local burst = limit * interval
  local unit = math.max(cost, 1)
  local fits = unit <= limit
  -- Microseconds the bucket is "ahead" of now once this request is charged.
  local needed = (t - now) + math.min(unit, limit) * interval
  local allowed = fits and needed <= burst
  local tat = t
  if allowed then
    tat = t + cost * interval
  end

  local ahead = tat - now
  local remaining = floor_div(math.max(0, burst - ahead), interval)
  local retry_after = -1
  if not allowed and fits then
    retry_after = needed - burst
  end

  local new = nil
  if tat > now then
    new = fmt(tat)
  end
  return allowed and 1 or 0, remaining, ahead, retry_after, new, tat
end

-- Refund (change < 0: tat = max(now, t - |change| * T)) or penalty
-- (change > 0: tat = t + change * T, saturating at 2^52), t = max(tat, now).
-- Returns the new state (nil: equal to absent) and its expiry, or false and
-- the kind of state when `raw` is not one.
local function gcra_adjust(raw, limit, window, interval, change)
  local t = gcra_time(raw)
  if not t then
    return false, 'bucket'
  end
  -- |change| * T may be inexact only beyond 2^53, where both bounds apply.
  local tat = math.min(math.max(now, t + change * interval), MAX_TIME)
  if tat > now then
    return fmt(tat), tat
  end
  return nil, now
end
