
-- tollgate: fixed window. State: "start:count", the start of the
-- clock-aligned bucket (floor(now / W) * W) and the units charged in it.
-- Port of crates/tollgate/src/strategy/fixed_window.rs.
local function fixed_window(raw, limit, window, interval, cost)
  local s = nil
  if raw then
    s = parse(raw, 2)
    if not s then
      return nil, 'fixed-window'
    end
  end

  local t = now
  local start, count
  if s and now < s[1] then
    -- The clock went backwards: stay in the stored bucket, at its start.
    start, count, t = s[1], s[2], s[1]
  elseif s and now - s[1] < window then
    start, count = s[1], s[2]
  else
    start, count = floor_div(now, window) * window, 0
  end

  local bucket_end = start + window
  local unit = math.max(cost, 1)
  local allowed = unit <= limit and count <= limit - unit
  if allowed then
    count = count + cost
  end

  local reset = 0
  if count > 0 then
    reset = bucket_end - t
  end
  local retry_after = -1
  if not allowed and unit <= limit then
    retry_after = bucket_end - t
  end

  local new = nil
  if count > 0 then
    new = fmt(start) .. ':' .. fmt(count)
  end
  return allowed and 1 or 0, math.max(0, limit - count), reset, retry_after, new, bucket_end
end
