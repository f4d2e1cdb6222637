
-- tollgate: the main part of a compound policy, several limits decided as
-- one step. It follows the prelude and every strategy file, and defines
-- `compound(KEYS, ARGV)`.
--
-- KEYS[i]  limit i's state key; all of one rate-limit key's state keys share
--          a Redis Cluster hash slot
-- ARGV[2]  the cost (the caller clamps it to the largest L + 1: every larger
--          cost decides exactly alike)
-- ARGV[3]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[4 * i .. 4 * i + 3]  limit i: its strategy function (fixed_window,
--          sliding_window or gcra), L, W and T in microseconds, as for a
--          single limit
-- ARGV[4 * n + 4]  only for usage reported after the fact (`charge:
--          always`, for a policy of one limit too): the units to charge,
--          the cost itself (at most 2^51)
--
-- Each limit decides by its own function, as decide_all in
-- crates/tollgate/src/strategy/compound.rs does. The request is admitted iff
-- every limit admits it, and only then is any limit charged. Every limit's
-- state is then saved as its function leaves it: brought forward to now,
-- which for a limit that denied or peeked can delete or rewrite it, as a
-- single limit's script does (leaving it alone would differ once the clock
-- steps back). Returns allowed (0 or 1), remaining, reset_us and
-- retry_after_us (-1 for none) of each limit in order, 4 numbers per limit,
-- which the caller combines into one decision; for a blocked key {-1, the
-- microseconds left of the block, the largest reset_us of a peek}.
--
-- A report (ARGV[4 * n + 4] given) ports SEMANTICS.md "Usage reported after
-- the fact" and charge_all in crates/tollgate/src/strategy/charge.rs: decided
-- as above; when denied (and the units not 0), every limit is charged the
-- units as a penalty charges them and reports what a peek reads from the
-- charged state. Its reply has one more number at the end: 1 when the
-- admission test admitted it, 0 when not. A blocked key is denied and
-- charged nothing.

local strategies = {
  fixed_window = fixed_window,
  sliding_window = sliding_window,
  gcra = gcra,
}

-- Reads the values of the state keys KEYS[1 .. n] into `raws` and their
-- states, a block split off (a value starting with 'B'), into `states`.
-- Returns the latest end of a block among them (0 for none), or nil and
-- the error reply for an unknown strategy function (ARGV[4 * i]) or a
-- malformed block. The key is blocked while any of its values says so.
local function read_limits(KEYS, ARGV, n, raws, states)
  local blocked_until = 0
  for i = 1, n do
    if not strategies[ARGV[4 * i]] then
      return nil, redis.error_reply('TOLLGATE unknown strategy function ' .. tostring(ARGV[4 * i]))
    end
    raws[i] = redis.call('GET', KEYS[i])
    states[i] = raws[i]
    if raws[i] and string.byte(raws[i], 1) == 66 then
      local ends
      ends, states[i] = split_block(raws[i])
      if not ends then
        return nil, malformed('blocked', KEYS[i])
      end
      blocked_until = math.max(blocked_until, ends)
    end
  end
  return blocked_until
end

-- The reply for a key blocked until `blocked_until`: denied, nothing
-- written, the reset that of a peek of every limit (`run(i, 0)`, which
-- fills `reply`).
local function blocked_reply(run, reply, KEYS, n, blocked_until)
  local reset = 0
  for i = 1, n do
    local admits, what = run(i, 0)
    if admits == nil then
      return malformed(what, KEYS[i])
    end
    reset = math.max(reset, reply[4 * i - 1])
  end
  return { -1, blocked_until - now, reset }
end

-- The decision of each limit of KEYS and ARGV (ARGV[4 * i .. 4 * i + 3]:
-- limit i's strategy function, L, W and T): run(i, c) decides limit i for
-- `c` units by its strategy function on states[i], keeps its four numbers
-- in `reply` and its new state and expiry in `news` and `expiries`, and
-- returns whether it admits, or nil and the kind of state when its value is
-- none.
local function decider(ARGV, states, reply, news, expiries)
  return function(i, c)
    local allowed, remaining, reset, retry_after, new, expires_at = strategies[ARGV[4 * i]](
      states[i], numbers[ARGV[4 * i + 1]] or arg(ARGV[4 * i + 1]), window_of(ARGV[4 * i + 2]),
      numbers[ARGV[4 * i + 3]] or arg(ARGV[4 * i + 3]), c)
    if allowed == nil then
      return nil, remaining
    end
    reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = allowed, remaining, reset, retry_after
    news[i], expiries[i] = new, expires_at
    return allowed == 1
  end
end

-- Decides all n limits for `c` units with `run` (a decider's) as one step:
-- when one denies, nothing is charged, and a limit that admitted reports
-- and keeps its uncharged state, as a peek sees it. Returns whether all
-- admitted, or nil and the error reply for a value that is no state.
local function decide_limits(run, reply, KEYS, n, c)
  local all = true
  for i = 1, n do
    local admits, what = run(i, c)
    if admits == nil then
      return nil, malformed(what, KEYS[i])
    end
    all = all and admits
  end
  if not all and c > 0 then
    for i = 1, n do
      if reply[4 * i - 3] == 1 then
        run(i, 0)
      end
    end
  end
  return all
end

-- Opens an entry point on the n limits of KEYS[1 .. n] and ARGV (after
-- read_clock): reads their values and makes their decider. Returns the
-- reply to send at once (an error, or a blocked key's reply), or nil
-- followed by the values (`raws`), their states, the reply, the new states
-- and expiries the decider fills, and the decider.
local function open_limits(KEYS, ARGV, n)
  local raws, states, reply, news, expiries = {}, {}, {}, {}, {}
  local run = decider(ARGV, states, reply, news, expiries)
  local blocked_until, err = read_limits(KEYS, ARGV, n, raws, states)
  if not blocked_until then
    return err
  end
  if blocked_until > now then
    return blocked_reply(run, reply, KEYS, n, blocked_until)
  end
  return nil, raws, states, reply, news, expiries, run
end

-- The penalty of each strategy function, by its name.
local penalties = {
  fixed_window = fixed_window_adjust,
  sliding_window = sliding_window_adjust,
  gcra = gcra_adjust,
}

-- Charges each of the n limits of KEYS and ARGV `amount` units as a penalty
-- does, on the states `run` (a decider's) decides from, then reads each as
-- a peek into `reply`. Returns nil, or the error reply for a value that is
-- no state.
local function charge_limits(run, states, KEYS, ARGV, n, amount)
  for i = 1, n do
    local new, what = penalties[ARGV[4 * i]](states[i], numbers[ARGV[4 * i + 1]] or arg(ARGV[4 * i + 1]),
      window_of(ARGV[4 * i + 2]), numbers[ARGV[4 * i + 3]] or arg(ARGV[4 * i + 3]), amount)
    if new == false then
      return malformed(what, KEYS[i])
    end
    states[i] = new or false
    run(i, 0)
  end
  return nil
end

local function compound(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local cost = numbers[ARGV[2]] or arg(ARGV[2])
  local n = #KEYS
  local early, raws, states, reply, news, expiries, run = open_limits(KEYS, ARGV, n)
  if early then
    return early
  end

  local all, err = decide_limits(run, reply, KEYS, n, cost)
  if all == nil then
    return err
  end
  local amount = tonumber(ARGV[4 * n + 4])
  if amount then
    if not all and amount > 0 then
      local bad = charge_limits(run, states, KEYS, ARGV, n, amount)
      if bad then
        return bad
      end
    end
    reply[4 * n + 1] = all and 1 or 0
  end

  local grace_ms = numbers[ARGV[3]] or arg(ARGV[3])
  for i = 1, n do
    save(KEYS[i], raws[i], news[i], expiries[i], grace_ms)
  end
  return reply
end

