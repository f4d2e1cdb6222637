
-- tollgate: a request that asks for a lease (SEMANTICS.md "Leased
-- quotas"), for a policy of one limit or several. It follows the prelude,
-- every strategy file, compound.lua and operate.lua, and defines
-- `lease(KEYS, ARGV)`.
--
-- KEYS[i]  limit i's state key, for i = 1 .. n (as for compound.lua)
-- KEYS[n + 1]  when present, the key's lessees: a sorted set of the
--          processes leasing it, each scored with the microsecond until
--          which it counts (in the hash slot of KEYS[1])
-- ARGV[2]  the request's cost (the caller clamps it to the largest L + 1)
-- ARGV[3]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[4 * i .. 4 * i + 3]  limit i: its strategy function, L, W and T
-- ARGV[4 * n + 4]  want: the most units to lease beyond the cost
-- ARGV[4 * n + 5]  the lessee: who asks
-- ARGV[4 * n + 6]  the lease's maximum age in microseconds
-- ARGV[4 * n + 7]  units of an ended lease to give back first
-- ARGV[4 * n + 8]  the microsecond before which they are given back (-1:
--          always); a bucket gives back at most floor((before - now) / T)
--          of them, what of the lease still weighs on it
-- ARGV[4 * n + 9]  n, the number of limits
--
-- Ports crates/tollgate/src/strategy/lease.rs: the units given back are
-- refunded on every limit (when now is before their window's end); the
-- lessee is counted; with `left` the smallest remaining of a peek and
-- `lessees` the processes counted, `extra = min(want, floor(left / (2 *
-- lessees)) - cost)`; cost + extra units are decided as one request when
-- extra > 0, and the cost alone otherwise or when that is denied, exactly
-- as compound.lua decides. Returns compound.lua's reply followed by extra,
-- the microsecond at which the earliest window of the lease ends and the
-- microseconds from now to it (-1 and -1 for none), and the microsecond
-- before which the lease's units are given back (return_before in
-- lease.rs: the earliest window end or bucket tat after the charge; -1 for
-- none); for a blocked key compound.lua's blocked reply (nothing given
-- back, charged or leased).

local function lease(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local n = tonumber(ARGV[#ARGV])
  local cost = tonumber(ARGV[2])
  local want = tonumber(ARGV[4 * n + 4])
  local lessee = ARGV[4 * n + 5]
  local age = tonumber(ARGV[4 * n + 6])
  local returning = tonumber(ARGV[4 * n + 7])
  local before = tonumber(ARGV[4 * n + 8])
  local early, raws, states, reply, news, expiries, run = open_limits(KEYS, ARGV, n)
  if early then
    return early
  end
  local limits = {}
  for i = 1, n do
    limits[i] = { ARGV[4 * i], tonumber(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3]) }
  end

  -- The units of an ended lease, given back inside their window.
  if returning > 0 and (before < 0 or now < before) then
    for i = 1, n do
      local l = limits[i]
      local units = returning
      if l[1] == 'gcra' and before >= 0 then
        units = math.min(returning, floor_div(before - now, l[4]))
      end
      if units > 0 then
        local new, expires_at = adjusts[l[1]](states[i], l[2], l[3], l[4], -units)
        if new == false then
          return malformed(expires_at, KEYS[i])
        end
        states[i] = new or false
      end
    end
  end

  local lessees = 1
  if want > 0 and KEYS[n + 1] then
    local set = KEYS[n + 1]
    redis.call('ZREMRANGEBYSCORE', set, '-inf', fmt(now))
    redis.call('ZADD', set, fmt(now + age), lessee)
    lessees = redis.call('ZCARD', set)
    -- Kept past its last lessee's score by the expiry grace too, as the
    -- state is: on a caller's clock the server's time may run ahead of it.
    redis.call('PEXPIRE', set, fmt(ceil_div(age, 1000) + 1 + tonumber(ARGV[3])))
  end

  local extra = 0
  if cost > 0 and want > 0 then
    local admits, err = decide_limits(run, reply, KEYS, n, 0)
    if admits == nil then
      return err
    end
    local left = reply[2]
    for i = 2, n do
      left = math.min(left, reply[4 * i - 2])
    end
    extra = math.min(want, floor_div(left, 2 * lessees) - cost)
  end

  local granted = 0
  if extra > 0 then
    local admits, err = decide_limits(run, reply, KEYS, n, cost + extra)
    if admits == nil then
      return err
    end
    if admits then
      granted = extra
    end
  end
  if granted == 0 then
    local admits, err = decide_limits(run, reply, KEYS, n, cost)
    if admits == nil then
      return err
    end
  end

  -- The end of the earliest window the lease was charged in, and the
  -- earliest of it and each bucket's tat after the charge.
  local window_end, return_before = -1, -1
  if granted > 0 then
    for i = 1, n do
      local name, window = limits[i][1], limits[i][3]
      local ends = nil
      if name == 'fixed_window' then
        ends = expiries[i]
      elseif name == 'sliding_window' then
        ends = expiries[i] - window
      end
      if ends and (window_end < 0 or ends < window_end) then
        window_end = ends
      end
      if name == 'gcra' and news[i] then
        ends = expiries[i]
      end
      if ends and (return_before < 0 or ends < return_before) then
        return_before = ends
      end
    end
  end

  local grace_ms = tonumber(ARGV[3])
  for i = 1, n do
    save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
  end
  reply[4 * n + 1] = granted
  reply[4 * n + 2] = window_end
  reply[4 * n + 3] = window_end < 0 and -1 or window_end - now
  reply[4 * n + 4] = return_before
  return reply
end
