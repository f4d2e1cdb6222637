
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
-- crates/tollgate/src/strategy/reserve.rs: with buckets only and a cost of
-- 1 to every L, the wait is the largest of max(0, t + cost * T - now - L *
-- T) with t = max(tat, now); within the longest wait every limit's tat
-- becomes max(tat, now + wait) + cost * T. Otherwise the request is decided
-- as compound.lua decides it. Returns compound.lua's four numbers per limit
-- (for a refusal beyond the longest wait, those of a peek), then the
-- status (0 decided, 1 reserved, 2 refused beyond the longest wait), the
-- wait (reserved) or the wait beyond the longest (refused), the index of
-- the limit with the longest wait, and each limit's tat after a
-- reservation (-1 otherwise); for a blocked key compound.lua's blocked
-- reply.
--
-- cancel: ARGV[4 * n + 4] the reservation's proceed time in microseconds,
-- ARGV[4 * n + 4 + i] the tat it left on limit i. Before the proceed time,
-- when every limit's tat is still the one the reservation left (and the
-- key is not blocked), gives its cost back on every limit as a refund
-- does. Returns {1} when given back, {0} otherwise.

local function reserve(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = #KEYS
  local cost = tonumber(ARGV[2])
  local max_delay = tonumber(ARGV[4 * n + 4])
  local raws, states, reply, news, expiries = {}, {}, {}, {}, {}

  local run = decider(ARGV, states, reply, news, expiries)

  local blocked_until, err = read_limits(KEYS, ARGV, n, raws, states)
  if not blocked_until then
    return err
  end
  if blocked_until > now then
    return blocked_reply(run, reply, KEYS, n, blocked_until)
  end

  local ahead = cost > 0
  for i = 1, n do
    if ARGV[4 * i] ~= 'gcra' or cost > tonumber(ARGV[4 * i + 1]) then
      ahead = false
    end
  end
  local grace_ms = tonumber(ARGV[3])

  if not ahead then
    -- Decided as compound.lua decides.
    local all, err = decide_limits(run, reply, KEYS, n, cost)
    if all == nil then
      return err
    end
    for i = 1, n do
      save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
    end
    reply[4 * n + 1], reply[4 * n + 2], reply[4 * n + 3] = 0, 0, 0
    for i = 1, n do
      reply[4 * n + 3 + i] = -1
    end
    return reply
  end

  local delay, longest, times = 0, 1, {}
  for i = 1, n do
    local stored, t = gcra_time(states[i])
    if not t then
      return malformed('bucket', KEYS[i])
    end
    times[i] = t
    local limit, interval = tonumber(ARGV[4 * i + 1]), tonumber(ARGV[4 * i + 3])
    local wait = t + cost * interval - now - limit * interval
    if wait > delay then
      delay, longest = wait, i
    end
  end

  if delay > max_delay then
    -- Refused: nothing charged; the peek's numbers.
    for i = 1, n do
      local admits, what = run(i, 0)
      if admits == nil then
        return malformed(what, KEYS[i])
      end
      save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
    end
    reply[4 * n + 1], reply[4 * n + 2], reply[4 * n + 3] = 2, delay - max_delay, longest - 1
    for i = 1, n do
      reply[4 * n + 3 + i] = -1
    end
    return reply
  end

  local proceed = now + delay
  for i = 1, n do
    local limit, interval = tonumber(ARGV[4 * i + 1]), tonumber(ARGV[4 * i + 3])
    local tat = (times[i] > proceed and times[i] or proceed) + cost * interval
    local burst = limit * interval
    local ahead_by = tat - now
    local remaining = 0
    if burst > ahead_by then
      remaining = floor_div(burst - ahead_by, interval)
    end
    reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = 1, remaining, ahead_by, -1
    save(KEYS[i], raws[i], fmt(tat), tat, grace_ms)
    reply[4 * n + 3 + i] = tat
  end
  reply[4 * n + 1], reply[4 * n + 2], reply[4 * n + 3] = 1, delay, longest - 1
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
    if not raws[i] or number(raws[i]) ~= tonumber(ARGV[4 * n + 4 + i]) then
      return { 0 }
    end
  end
  local grace_ms = tonumber(ARGV[3])
  for i = 1, n do
    local new, expires_at = gcra_adjust(raws[i], tonumber(ARGV[4 * i + 1]), tonumber(ARGV[4 * i + 2]),
      tonumber(ARGV[4 * i + 3]), -cost)
    save(KEYS[i], raws[i], new, expires_at, grace_ms)
  end
  return { 1 }
end
