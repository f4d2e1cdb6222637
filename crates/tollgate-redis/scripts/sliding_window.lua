
-- tollgate: approximate sliding window. State: "start:curr:prev", the start
-- of the current window (anchored at the key's first request) and the units
-- charged in it and in the window before. Port of
-- crates/tollgate/src/strategy/sliding_window.rs.

-- The smallest d >= 1 at which a request of `unit` units would be admitted,
-- `e` microseconds into the current window (it was denied at d = 0, and
-- unit <= L).
local function sliding_window_retry_after(limit, window, unit, curr, prev, e)
  -- Still inside the current window: the previous window's weight decays.
  -- Admitted at d iff prev * (W - e - d) < (L + 1 - unit - curr) * W.
  local headroom = math.max(0, (limit + 1) - (unit + curr))
  if headroom > 0 and prev > 0 then
    local q = floor_div(headroom * window - 1, prev)
    local d = math.max(1, math.max(0, (window - e) - q))
    if d < window - e then
      return d
    end
  end
  -- In the next window the current count becomes the previous one.
  -- Admitted at d iff curr * (2W - e - d) < (L + 1 - unit) * W.
  if curr == 0 then
    return window - e
  end
  local q = floor_div((limit + 1 - unit) * window - 1, curr)
  return math.max(window - e, math.max(0, (2 * window - e) - q))
end

-- The state rolled forward to now as a decision sees it: the time within
-- it, the current window's start and both counters, then the texts of the
-- start and the previous count when they are the stored ones (nil
-- otherwise); nil when `raw` is not a sliding-window state.
local function sliding_window_roll(raw, window)
  local t = now
  local start, curr, prev = now, 0, 0
  local start_text, prev_text
  if raw then
    -- Three fields of decimal digits, each below 2^53.
    local s_text, c, p_text = string.match(raw, '^(%d+):(%d+):(%d+)$')
    if not s_text then
      return nil
    end
    -- Digits only: `+ 0` reads them as tonumber does, without its call.
    local s, p
    s, c, p = s_text + 0, c + 0, p_text + 0
    if s >= 9007199254740992 or c >= 9007199254740992 or p >= 9007199254740992 then
      return nil
    end
    if t < s then
      t = s
    end
    -- k = floor((t - s) / W) windows have begun since the stored one.
    local d = t - s
    if d < window then
      start, curr, prev = s, c, p
      start_text, prev_text = s_text, p_text
    elseif d < 2 * window then
      start, curr, prev = s + window, 0, c
    end
    -- Both counters zero (including k >= 2): the same as absent state, a
    -- fresh window anchored at now.
    if curr == 0 and prev == 0 then
      start, start_text = t, nil
    end
  end
  return t, start, curr, prev, start_text, prev_text
end

-- The state (nil: equal to absent) and its expiry. `start_text` and
-- `prev_text`, when given, are the texts of `start` and `prev` (as a roll
-- returns them): the state is then written from them and the count, which
-- formats one number instead of three.
local function sliding_window_state(start, curr, prev, window, start_text, prev_text)
  if curr > 0 then
    if start_text then
      return start_text .. ':' .. fmt(curr) .. ':' .. prev_text, start + 2 * window
    end
    return string.format('%d:%d:%d', start, curr, prev), start + 2 * window
  elseif prev > 0 then
    return string.format('%d:%d:%d', start, curr, prev), start + window
  end
  return nil, start + window
end

local function sliding_window(raw, limit, window, interval, cost)
  local t, start, curr, prev, start_text, prev_text = sliding_window_roll(raw, window)
  if not t then
    return nil, 'sliding-window'
  end

  local e = t - start
  local unit = cost > 1 and cost or 1

  -- Scaled estimate S = prev * (W - e) + curr * W; admitted iff
  -- S + (unit - 1) * W < L * W, written so no term exceeds 2 * L * W.
  local weighted = prev * (window - e)
  local before = weighted + curr * window
  local allowed = unit <= limit and before < (limit - unit + 1) * window
  local retry_after = -1
  if not allowed and unit <= limit then
    retry_after = sliding_window_retry_after(limit, window, unit, curr, prev, e)
  end
  if allowed then
    curr = curr + cost
  end

  -- remaining = max(0, ceil((L * W - S) / W)) for the estimate S after
  -- charging, which is L - curr - floor(prev * (W - e) / W): the weighted
  -- previous count is its only fraction.
  local remaining = limit - curr
  if prev > 0 then
    remaining = remaining - floor_div(weighted, window)
  end
  if remaining < 0 then
    remaining = 0
  end
  local reset = 0
  if curr > 0 then
    reset = 2 * window - e
  elseif prev > 0 then
    reset = window - e
  end

  local new, expires_at = sliding_window_state(start, curr, prev, window, start_text, prev_text)
  return allowed and 1 or 0, remaining, reset, retry_after, new, expires_at
end

-- Refund (change < 0: curr -= min(-change, curr)) or penalty (change > 0:
-- curr += change, saturating at floor(2^52 / W), which is at least L) after
-- rolling as a decision does. Returns the new state (nil: equal to absent)
-- and its expiry, or false and the kind of state when `raw` is not one.
local function sliding_window_adjust(raw, limit, window, interval, change)
  local t, start, curr, prev = sliding_window_roll(raw, window)
  if not t then
    return false, 'sliding-window'
  end
  curr = math.min(math.max(0, curr + change), floor_div(MAX_TIME, window))
  return sliding_window_state(start, curr, prev, window)
end
