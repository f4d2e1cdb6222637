
-- tollgate: the generic cell rate algorithm shared by the token bucket and
-- the leaky-bucket meter. State: "tat", the theoretical arrival time at which
-- the bucket is back to fresh. Port of crates/tollgate/src/strategy/gcra.rs.
local function gcra(raw, limit, window, interval, cost)
  local t = now
  if raw then
    local s = parse(raw, 1)
    if not s then
      return nil, 'bucket'
    end
    if s[1] > t then
      t = s[1]
    end
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
