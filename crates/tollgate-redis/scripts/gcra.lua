-- tollgate: the generic cell rate algorithm shared by the token bucket and
-- the leaky-bucket meter. State: "tat", the theoretical arrival time at which
-- the bucket is back to fresh. Port of crates/tollgate/src/strategy/gcra.rs.
-- The stored tat (false for absent state) and t = max(tat, now), the time
-- the bucket is at (now for absent state); nil when `raw` is not a bucket
-- state.
local function gcra_time(raw)
  if not raw then
    return false, now
  end
  local tat = number(raw)
  if not tat then
    return nil
  end
  return tat, tat > now and tat or now
end

local function gcra(raw, limit, window, interval, cost)
  local stored, t = gcra_time(raw)
  if not t then
    return nil, 'bucket'
  end

  local burst = limit * interval
  -- unit = max(cost, 1); the comparisons below stand in for math.max and
  -- math.min, which cost a call each.
  local unit = cost > 1 and cost or 1
  local fits = unit <= limit
  -- Microseconds the bucket is "ahead" of now once this request is charged.
  local needed = (t - now) + (fits and unit or limit) * interval
  local allowed = fits and needed <= burst
  local tat = t
  if allowed then
    tat = t + cost * interval
  end

  local ahead = tat - now
  local remaining = 0
  if burst > ahead then
    remaining = floor_div(burst - ahead, interval)
  end
  local retry_after = -1
  if not allowed and fits then
    retry_after = needed - burst
  end

  -- `raw` itself when unchanged, so that nothing is written.
  local new = nil
  if tat > now then
    new = tat == stored and raw or fmt(tat)
  end
  return allowed and 1 or 0, remaining, ahead, retry_after, new, tat
end

-- Refund (change < 0: tat = max(now, t - |change| * T)) or penalty
-- (change > 0: tat = t + change * T, saturating at 2^52), t = max(tat, now).
-- Returns the new state (nil: equal to absent) and its expiry, or false and
-- the kind of state when `raw` is not one.
local function gcra_adjust(raw, limit, window, interval, change)
  local _, t = gcra_time(raw)
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
