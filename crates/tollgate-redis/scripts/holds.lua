
-- tollgate: estimates settled by usage (SEMANTICS.md "Estimates settled"),
-- for a policy of one limit or several: a hold decided and recorded, and
-- its settle, each one atomic step. It follows the prelude, every strategy
-- file, compound.lua and operate.lua, and defines `hold(KEYS, ARGV)` and
-- `settle(KEYS, ARGV)`.
--
-- KEYS[i]  limit i's state key, for i = 1 .. n (as for compound.lua)
-- KEYS[n + 1]  the key's holds: a sorted set of hold identifiers (32
--          hexadecimal digits), each scored with the microsecond from which
--          it can no longer be settled (in the hash slot of KEYS[1])
-- KEYS[n + 2]  the holds' figures: a hash of 'estimate:taken' by
--          identifier, in the same slot
-- ARGV[2]  hold: the estimate (the caller clamps it to the largest L + 1:
--          every larger estimate is denied alike); settle: the usage (at
--          most 2^51)
-- ARGV[3]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[4 * i .. 4 * i + 3]  limit i: its strategy function, L, W and T
-- ARGV[4 * n + 4]  the hold's identifier
-- ARGV[4 * n + 5]  hold only: the policy's longest window in microseconds
--
-- Ports crates/tollgate/src/strategy/holds.rs. A hold is decided exactly as
-- compound.lua decides a request of the estimate's cost; admitted with an
-- estimate of at least 1, it is recorded with taken = now and expires =
-- now + the longest window. Both keys expire with their last hold (plus
-- the grace); holds expired at now are dropped whenever they are touched.
--
-- hold returns compound.lua's reply (4 numbers per limit, or a blocked
-- key's {-1, left, reset}). settle returns, for a blocked key whose hold is
-- absent or expired, the blocked reply; otherwise 4 numbers per limit read
-- as a peek of the states after it, then 1 when the hold was settled, 0
-- when it was absent or expired (nothing then charged or given back: the
-- states are saved as a peek saves them, brought forward to now).

-- Drops the holds in `set` (figures in `figures`) expired at `at`.
local function drop_expired_holds(set, figures, at)
  while true do
    local gone = redis.call('ZRANGEBYSCORE', set, '-inf', fmt(at), 'LIMIT', 0, 512)
    if #gone == 0 then
      return
    end
    redis.call('ZREM', set, unpack(gone))
    redis.call('HDEL', figures, unpack(gone))
    if #gone < 512 then
      return
    end
  end
end

-- Sets both keys of the holds to expire with the last hold in `set` plus
-- `grace_ms` (on the server's clock, or from the caller's now), or deletes
-- them when no hold is left.
local function keep_holds(set, figures, grace_ms)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  local ends = last[2] and number(last[2])
  if not ends then
    redis.call('DEL', set, figures)
    return
  end
  expire_beside(set, figures, ends, grace_ms)
end

local function hold(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = #KEYS - 2
  local estimate = numbers[ARGV[2]] or arg(ARGV[2])
  local early, raws, _, reply, news, expiries, run = open_limits(KEYS, ARGV, n)
  if early then
    return early
  end
  local all, err = decide_limits(run, reply, KEYS, n, estimate)
  if all == nil then
    return err
  end
  local grace_ms = numbers[ARGV[3]] or arg(ARGV[3])
  for i = 1, n do
    save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
  end
  if all and estimate > 0 then
    local set, figures = KEYS[n + 1], KEYS[n + 2]
    drop_expired_holds(set, figures, now)
    local id = ARGV[4 * n + 4]
    redis.call('ZADD', set, fmt(now + tonumber(ARGV[4 * n + 5])), id)
    redis.call('HSET', figures, id, fmt(estimate) .. ':' .. fmt(now))
    keep_holds(set, figures, grace_ms)
  end
  return reply
end

-- Takes the hold `id` out of `set` and `figures`, once expired holds are
-- dropped: its estimate and the microsecond it was taken, or nil when it
-- is absent or expired.
local function take_hold(set, figures, id, grace_ms)
  drop_expired_holds(set, figures, now)
  local kept = redis.call('HGET', figures, id)
  if not kept or not redis.call('ZSCORE', set, id) then
    return nil
  end
  redis.call('ZREM', set, id)
  redis.call('HDEL', figures, id)
  keep_holds(set, figures, grace_ms)
  local estimate, taken = string.match(kept, '^(%d+):(%d+)$')
  if not estimate then
    return nil
  end
  return number(estimate), number(taken)
end

-- The state of limit `l` ({function, L, W, T}) after giving back `units`
-- of a hold taken at `taken` from `state`, limited to what of it still
-- counts: a fixed window within the bucket it was taken in, a sliding
-- window from the window it was taken in (current: curr; previous: prev),
-- a bucket as its refund. Returns the new state (nil: absent) and its
-- expiry; `state` itself and no expiry when nothing is given back; false
-- and the kind of state for a value that is none.
local function give_back(l, state, taken, units)
  local name, limit, window, interval = l[1], l[2], l[3], l[4]
  if name == 'gcra' then
    return gcra_adjust(state, limit, window, interval, -units)
  end
  if not state then
    return state, nil
  end
  if name == 'fixed_window' then
    local start, what, _, bucket_end = fixed_window_bucket(state, window)
    if not start then
      return false, what or 'fixed-window'
    end
    if taken < start or taken >= bucket_end then
      return state, nil
    end
    return fixed_window_adjust(state, limit, window, interval, -units)
  end
  local t, start, curr, prev = sliding_window_roll(state, window)
  if not t then
    return false, 'sliding-window'
  end
  if taken >= start then
    curr = curr - math.min(units, curr)
  elseif taken >= start - window then
    prev = prev - math.min(units, prev)
  end
  return sliding_window_state(start, curr, prev, window)
end

-- Settles a hold of `estimate` units taken at `taken` with `used` units on
-- every limit's state in `states` (their values `raws`): each state is
-- replaced by the state after, and each changed value is saved, a running
-- block kept as operate.lua keeps it. Returns nil, or the error reply for
-- a value that is no state.
local function settle_limits(KEYS, ARGV, n, raws, states, estimate, taken, used, grace_ms)
  local values, expiries, changed = {}, {}, {}
  for i = 1, n do
    local l = { ARGV[4 * i], tonumber(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3]) }
    local new, expires_at = states[i], nil
    if used < estimate then
      new, expires_at = give_back(l, states[i], taken, estimate - used)
    elseif used > estimate then
      new, expires_at = adjusts[l[1]](states[i], l[2], l[3], l[4], used - estimate)
    end
    -- No expiry: nothing changed (`new` is the state itself).
    if expires_at ~= nil then
      if new == false then
        return malformed(expires_at, KEYS[i])
      end
      states[i], changed[i] = new or false, true
      local ends = raws[i] and string.byte(raws[i], 1) == 66 and split_block(raws[i])
      if ends and ends > now then
        expires_at = new and math.max(expires_at, ends) or ends
        new = 'B' .. fmt(ends) .. '|' .. (new or '')
      end
      values[i], expiries[i] = new, expires_at
    end
  end
  for i = 1, n do
    if changed[i] then
      save(KEYS[i], raws[i], values[i], expiries[i], grace_ms)
    end
  end
  return nil
end

-- Reads every limit of the states `run` (a decider's) decides from as a
-- peek, into `reply`. Returns nil, or the error reply for a value that is
-- no state.
local function peek_limits(run, KEYS, n)
  for i = 1, n do
    local admits, what = run(i, 0)
    if admits == nil then
      return malformed(what, KEYS[i])
    end
  end
  return nil
end

local function settle(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = #KEYS - 2
  local used = tonumber(ARGV[2])
  local grace_ms = numbers[ARGV[3]] or arg(ARGV[3])
  local raws, states, reply, news, expiries = {}, {}, {}, {}, {}
  local run = decider(ARGV, states, reply, news, expiries)
  local blocked_until, err = read_limits(KEYS, ARGV, n, raws, states)
  if not blocked_until then
    return err
  end
  local estimate, taken = take_hold(KEYS[n + 1], KEYS[n + 2], ARGV[4 * n + 4], grace_ms)
  if estimate then
    local bad = settle_limits(KEYS, ARGV, n, raws, states, estimate, taken, used, grace_ms)
    if bad then
      return bad
    end
  elseif blocked_until > now then
    return blocked_reply(run, reply, KEYS, n, blocked_until)
  end
  local bad = peek_limits(run, KEYS, n)
  if bad then
    return bad
  end
  if not estimate then
    -- A peek, saved as compound.lua saves one: each state brought forward
    -- to now.
    for i = 1, n do
      save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
    end
  end
  reply[4 * n + 1] = estimate and 1 or 0
  return reply
end
