
-- tollgate: fixed window. State: "start:count", the start of the
-- clock-aligned bucket (floor(now / W) * W), or of the calendar period, and
-- the units charged in it.
-- Port of crates/tollgate/src/strategy/fixed_window.rs.
--
-- A calendar window's W is not a number but the boundaries of the periods
-- around the caller's now, "b1,b2,b3,b4" in microseconds (the caller knows
-- the time zone; the script does not): the period that holds the server's
-- now is [b1, b2), [b2, b3) or [b3, b4). `window_of` reads either.
-- The last bucket a decision started: its window, its start and the start's
-- text, so that a state in that bucket is recognised by comparing texts
-- (interned in Lua: one pointer comparison) instead of reading a number.
local current_window, current_start, current_text

-- The boundaries of a calendar window's W text, read once per text (a
-- loaded library keeps up to 64, as `numbers` keeps numbers).
local spans, spans_counted = {}, 0

-- W as the strategy functions take it: a number, or a calendar window's
-- boundaries (a table of four increasing numbers); nil for neither.
local function window_of(text)
  local number = numbers[text] or arg(text)
  if number then
    return number
  end
  local span = spans[text]
  if span then
    return span
  end
  local b1, b2, b3, b4 = string.match(text or '', '^(%d+),(%d+),(%d+),(%d+)$')
  if not b1 then
    return nil
  end
  span = { b1 + 0, b2 + 0, b3 + 0, b4 + 0 }
  if span[4] >= MAX_TIME or span[1] > span[2] or span[2] > span[3] or span[3] > span[4] then
    return nil
  end
  if LIBRARY then
    if spans_counted >= 64 then
      spans, spans_counted = {}, 0
    end
    spans[text] = span
    spans_counted = spans_counted + 1
  end
  return span
end

-- The bucket of a calendar window (`span` its boundaries): as
-- `fixed_window_bucket`, and the bucket's end; nil and 'calendar-span'
-- when the server's now (or, after the clock went back, the stored
-- period) is outside the periods sent.
local function calendar_bucket(raw, span)
  local start, stop
  for j = 1, 3 do
    if span[j] <= now and now < span[j + 1] then
      start, stop = span[j], span[j + 1]
    end
  end
  if not start then
    return nil, 'calendar-span'
  end
  if raw then
    local stored, count = string.match(raw, '^(%d+):(%d+)$')
    if not stored then
      return nil
    end
    stored, count = stored + 0, count + 0
    if stored >= 9007199254740992 or count >= 9007199254740992 then
      return nil
    end
    if stored == start then
      return start, count, now, stop
    elseif now < stored then
      -- The clock went backwards: stay in the stored period, at its start.
      for j = 1, 3 do
        if span[j] == stored then
          return stored, count, stored, span[j + 1]
        end
      end
      return nil, 'calendar-span'
    end
  end
  return start, 0, now, stop
end

-- The bucket a decision at now uses: its start, its count, the time within
-- it (now, or the bucket's start when the clock went back before it) and
-- its end; nil when `raw` is not a fixed-window state: two fields of decimal digits,
-- each below 2^53 (matched here rather than by a shared parser: a Lua call
-- costs as much as the checks).
local function fixed_window_bucket(raw, window)
  if type(window) == 'table' then
    return calendar_bucket(raw, window)
  end
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
      return start, count, start, start + window
    elseif now - start < window then
      return start, count, now, start + window
    end
  end
  local start = floor_div(now, window) * window
  if start ~= current_start or window ~= current_window then
    current_window, current_start, current_text = window, start, fmt(start)
  end
  return start, 0, now, start + window
end

local function fixed_window(raw, limit, window, interval, cost)
  local start, count, t, bucket_end = fixed_window_bucket(raw, window)
  if not start then
    return nil, count or 'fixed-window'
  end

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
  local start, count, _, bucket_end = fixed_window_bucket(raw, window)
  if not start then
    return false, count or 'fixed-window'
  end
  count = math.min(math.max(0, count + change), MAX_COUNT)
  if count == 0 then
    return nil, bucket_end
  end
  return string.format('%d:%d', start, count), bucket_end
end
