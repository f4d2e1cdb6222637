
-- tollgate: fixed window. State: "start:count", the start of the
-- clock-aligned bucket (floor(now / W) * W) and the units charged in it.
-- Port of crates/tollgate/src/strategy/fixed_window.rs.
-- The last bucket a decision started: its window, its start and the start's
-- text, so that a state in that bucket is recognised by comparing texts
-- (interned in Lua: one pointer comparison) instead of reading a number.
local current_window, current_start, current_text

-- The bucket a decision at now uses: its start, its count and the time
-- within it (now, or the bucket's start when the clock went back before it);
-- nil when `raw` is not a fixed-window state: two fields of decimal digits,
-- each below 2^53 (matched here rather than by a shared parser: a Lua call
-- costs as much as the checks).
local function fixed_window_bucket(raw, window)
  if raw then
    local start, count = string.match(raw, '^(%d+):(%d+)$')
    if not start then
      return nil
    end
    -- Digits only: `+ 0` reads them as tonumber does, without its call.
    if start == current_text and window == current_window then
      start = current_start
    else
      start = start + 0
    end
    count = count + 0
    if start >= 9007199254740992 or count >= 9007199254740992 then
      return nil
    end
    if now < start then
      -- The clock went backwards: stay in the stored bucket, at its start.
      return start, count, start
    elseif now - start < window then
      return start, count, now
    end
  end
  local start = floor_div(now, window) * window
  if start ~= current_start or window ~= current_window then
    current_window, current_start, current_text = window, start, fmt(start)
  end
  return start, 0, now
end

local function fixed_window(raw, limit, window, interval, cost)
  local start, count, t = fixed_window_bucket(raw, window)
  if not start then
    return nil, 'fixed-window'
  end

  local bucket_end = start + window
  local unit = cost > 1 and cost or 1
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
    new = string.format('%d:%d', start, count)
  end
  return allowed and 1 or 0, count < limit and limit - count or 0, reset, retry_after, new, bucket_end
end

-- Refund (change < 0: count -= min(-change, count)) or penalty (change > 0:
-- count += change, saturating at 2^51) in the bucket a decision at now
-- uses. Returns the new state (nil: equal to absent) and its expiry, or
-- false and the kind of state when `raw` is not one.
local function fixed_window_adjust(raw, limit, window, interval, change)
  local start, count = fixed_window_bucket(raw, window)
  if not start then
    return false, 'fixed-window'
  end
  count = math.min(math.max(0, count + change), MAX_COUNT)
  if count == 0 then
    return nil, start + window
  end
  return string.format('%d:%d', start, count), start + window
end
