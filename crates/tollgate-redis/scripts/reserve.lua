
-- tollgate: a reservation and its cancel (SEMANTICS.md "Waiting and
-- reservations"), for a policy of one limit or several. It follows the
-- prelude, every strategy file, compound.lua and operate.lua, and defines
-- `reserve(KEYS, ARGV)` and `cancel(KEYS, ARGV)`.
--
-- KEYS[i]  limit i's state key, for i = 1 .. n (as for compound.lua)
-- ARGV[2]  the cost (the caller clamps it to the largest L + 1)
-- ARGV[3]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[4 * i .. 4 * i + 3]  limit i: its strategy function, L, W and T
--
-- reserve: ARGV[4 * n + 4] the longest wait in microseconds. Ports
-- crates/tollgate/src/strategy/reserve.rs: when every limit is a bucket
-- (gcra) or a sliding window and the cost is 1 to every L, the request
-- proceeds at the latest of the limits' earliest slots (a bucket's max(now,
-- t + cost * T - L * T) with t = max(tat, now); a sliding window's the
-- earliest time its estimate admits it). Within the longest wait and before
-- the end of every sliding window's current window, every bucket's tat
-- becomes max(tat, proceed) + cost * T and every sliding window counts the
-- cost in its current window. Otherwise the request is decided as
-- compound.lua decides it. Returns compound.lua's four numbers per limit
-- (for a refusal, those of a peek), then the status (0 decided, 1
-- reserved, 2 refused beyond the longest wait, 3 refused until a sliding
-- window turns), the wait (reserved), the wait beyond the longest
-- (status 2) or until the window turns (status 3), the index of the limit
-- that bound it, the script's now, and three numbers per limit for the
-- state a reservation left (a bucket: tat, 0, 0; a sliding window: start,
-- current and previous count; -1, -1, -1 otherwise); for a blocked key
-- compound.lua's blocked reply.
--
-- cancel: ARGV[4 * n + 4] the reservation's proceed time in microseconds,
-- ARGV[4 * n + 2 + 3 * i .. 4 * n + 4 + 3 * i] the state it left on limit i
-- (as reserve returns it). Before the proceed time, when every limit's
-- state is still the one the reservation left (and the key is not
-- blocked), gives its cost back on every limit as a refund does. Returns
-- {1} when given back, {0} otherwise.

local function reserve(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = #KEYS
  local cost = tonumber(ARGV[2])
  local max_delay = tonumber(ARGV[4 * n + 4])
  local early, raws, states, reply, news, expiries, run = open_limits(KEYS, ARGV, n)
  if early then
    return early
  end

  local ahead = cost > 0
  for i = 1, n do
    if ARGV[4 * i] == 'fixed_window' or cost > tonumber(ARGV[4 * i + 1]) then
      ahead = false
    end
  end
  local grace_ms = tonumber(ARGV[3])

  -- The tail after the decisions: status, wait, limit, now, and the three
  -- numbers of each limit's state (-1 unless reserved).
  local function tail(status, wait, limit)
    reply[4 * n + 1], reply[4 * n + 2], reply[4 * n + 3], reply[4 * n + 4] = status, wait, limit - 1, now
    for i = 1, n do
      reply[4 * n + 2 + 3 * i], reply[4 * n + 3 + 3 * i], reply[4 * n + 4 + 3 * i] = -1, -1, -1
    end
    return reply
  end

  if not ahead then
    -- Decided as compound.lua decides.
    local all, err = decide_limits(run, reply, KEYS, n, cost)
    if all == nil then
      return err
    end
    for i = 1, n do
      save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
    end
    return tail(0, 0, 1)
  end

  -- Each limit's earliest slot; the latest of them (and its limit), the
  -- earliest end of a sliding window's current window (and its limit).
  local proceed, longest, turns, turning, times, rolled = now, 1, nil, 1, {}, {}
  for i = 1, n do
    local limit, window, interval = tonumber(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3])
    local earliest = now
    if ARGV[4 * i] == 'gcra' then
      local stored, t = gcra_time(states[i])
      if not t then
        return malformed('bucket', KEYS[i])
      end
      times[i] = t
      local fits = t + cost * interval - limit * interval
      if fits > now then
        earliest = fits
      end
    else
      local t, start, curr, prev = sliding_window_roll(states[i], window)
      if not t then
        return malformed('sliding-window', KEYS[i])
      end
      rolled[i] = { start, curr, prev }
      local e = t - start
      if prev * (window - e) + curr * window >= (limit - cost + 1) * window then
        earliest = t + sliding_window_retry_after(limit, window, cost, curr, prev, e)
      end
      if not turns or start + window < turns then
        turns, turning = start + window, i
      end
    end
    if earliest > proceed then
      proceed, longest = earliest, i
    end
  end

  local refused = nil
  if proceed - now > max_delay then
    refused = { 2, proceed - now - max_delay, longest }
  elseif turns and proceed >= turns then
    refused = { 3, turns - now, turning }
  end
  if refused then
    -- Nothing charged; the peek's numbers.
    for i = 1, n do
      local admits, what = run(i, 0)
      if admits == nil then
        return malformed(what, KEYS[i])
      end
      save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
    end
    return tail(refused[1], refused[2], refused[3])
  end

  tail(1, proceed - now, longest)
  for i = 1, n do
    local limit, window, interval = tonumber(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3])
    if ARGV[4 * i] == 'gcra' then
      local tat = (times[i] > proceed and times[i] or proceed) + cost * interval
      local burst = limit * interval
      local ahead_by = tat - now
      local remaining = 0
      if burst > ahead_by then
        remaining = floor_div(burst - ahead_by, interval)
      end
      reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = 1, remaining, ahead_by, -1
      save(KEYS[i], raws[i], fmt(tat), tat, grace_ms)
      reply[4 * n + 2 + 3 * i], reply[4 * n + 3 + 3 * i], reply[4 * n + 4 + 3 * i] = tat, 0, 0
    else
      -- Counted in the current window; the numbers of a peek at now.
      local start, curr, prev = rolled[i][1], rolled[i][2] + cost, rolled[i][3]
      local new, expires_at = sliding_window_state(start, curr, prev, window)
      local _, remaining, reset = sliding_window(new, limit, window, interval, 0)
      reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = 1, remaining, reset, -1
      save(KEYS[i], raws[i], new, expires_at, grace_ms)
      reply[4 * n + 2 + 3 * i], reply[4 * n + 3 + 3 * i], reply[4 * n + 4 + 3 * i] = start, curr, prev
    end
  end
  return reply
end

local function cancel(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = #KEYS
  local cost = tonumber(ARGV[2])
  local proceed = tonumber(ARGV[4 * n + 4])
  if now >= proceed then
    return { 0 }
  end
  local raws = {}
  for i = 1, n do
    raws[i] = redis.call('GET', KEYS[i])
    local a, b, c = tonumber(ARGV[4 * n + 2 + 3 * i]), tonumber(ARGV[4 * n + 3 + 3 * i]), tonumber(ARGV[4 * n + 4 + 3 * i])
    local same = false
    if not raws[i] or not a then
      same = false
    elseif ARGV[4 * i] == 'gcra' then
      same = number(raws[i]) == a
    elseif ARGV[4 * i] == 'sliding_window' then
      same = raws[i] == string.format('%d:%d:%d', a, b, c)
    end
    if not same then
      return { 0 }
    end
  end
  local grace_ms = tonumber(ARGV[3])
  for i = 1, n do
    local adjust = ARGV[4 * i] == 'gcra' and gcra_adjust or sliding_window_adjust
    local new, expires_at = adjust(raws[i], tonumber(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]),
      tonumber(ARGV[4 * i + 3]), -cost)
    save(KEYS[i], raws[i], new, expires_at, grace_ms)
  end
  return { 1 }
end
