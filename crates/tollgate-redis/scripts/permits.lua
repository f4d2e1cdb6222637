-- tollgate: permits of requests in flight (SEMANTICS.md "Requests in
-- flight"): operations on keys' permits under concurrency limits, each as
-- one atomic step, applied in order (several go out in one call under
-- load, each answered exactly as in a call of its own). It follows the
-- prelude and defines `permits(KEYS, ARGV)`.
--
-- KEYS[3i - 2]  operation i's state key: it holds nothing but a block
--               ('B<until>|')
-- KEYS[3i - 1]  the key's permits: a sorted set of permit identifiers (32
--               hexadecimal digits), each scored with the microsecond at
--               which it expires (in the hash slot of the state key)
-- KEYS[3i]      the key's units: a hash of each permit's cost by
--               identifier, and two more fields, 'held' (the sum of the
--               costs) and 'seen' (the latest microsecond an operation
--               used), in the same slot
-- ARGV[2]       milliseconds added to every expiry (grace for caller clocks)
-- ARGV[5i - 2]  operation i: acquire, peek, release or extend
-- ARGV[5i - 1]  its L, the limit
-- ARGV[5i]      its permits' ttl in microseconds
-- ARGV[5i + 1]  its permit's identifier ('' for a peek)
-- ARGV[5i + 2]  its cost, for an acquire or a peek (the caller clamps it to
--               L + 1: every larger cost is refused alike)
--
-- Ports crates/tollgate/src/strategy/permits.rs. The operation's time is
-- the later of now and 'seen'; the permits expired by then (scored at or
-- before it) are dropped first, their costs taken off 'held', so each
-- operation costs O(log n) plus the permits it drops. An acquire or a peek
-- of a blocked key is denied until the block ends, holding nothing. The
-- keys expire with their last permit, plus the grace; a key left with no
-- permit is deleted.
--
-- Returns five numbers per operation, in order: {done (0 or 1), in_flight,
-- reset_us, retry_after_us, expires_in_us} with -1 for no retry_after or
-- expires_in; for a blocked key {-1, the microseconds left of the block,
-- reset_us, 0, 0}. An operation that fails (a value that is no permits'
-- or no block under its keys) fails the call when it is the only one;
-- among several it answers {-2, 0, 0, 0, 0} and the others go on.

-- Drops the permits in `set` (costs in `units`) expired at `at`; returns
-- the units still held, `held` before.
local function drop_expired(set, units, at, held)
  while true do
    local gone = redis.call('ZRANGEBYSCORE', set, '-inf', fmt(at), 'LIMIT', 0, 512)
    if #gone == 0 then
      return held
    end
    local costs = redis.call('HMGET', units, unpack(gone))
    for i = 1, #gone do
      held = held - (number(costs[i] or '') or 0)
    end
    redis.call('ZREM', set, unpack(gone))
    redis.call('HDEL', units, unpack(gone))
    if #gone < 512 then
      return held
    end
  end
end

-- The microseconds from `at` until enough of the permits in `set`, taken
-- by expiry, have expired for `asked` units to fit under `limit` with
-- `held` held.
local function wait_for(set, units, at, held, asked, limit)
  local need, freed, from = held + asked - limit, 0, 0
  while true do
    local batch = redis.call('ZRANGE', set, from, from + 255, 'WITHSCORES')
    if #batch == 0 then
      return 0
    end
    local ids = {}
    for i = 1, #batch, 2 do
      ids[#ids + 1] = batch[i]
    end
    local costs = redis.call('HMGET', units, unpack(ids))
    for i = 1, #ids do
      freed = freed + (number(costs[i] or '') or 0)
      if freed >= need then
        return number(batch[2 * i]) - at
      end
    end
    from = from + 256
  end
end

-- The microsecond at which the last permit in `set` expires (nil for none).
local function last_expiry(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  return last[2] and number(last[2])
end

-- Writes 'held' and 'seen' and the keys' expiry (the last permit's expiry
-- plus `grace_ms`, on the server's clock or from the caller's now), or
-- deletes both keys when no permit is left (when they `existed`).
local function keep(set, units, held, at, last, grace_ms, existed)
  if not last then
    if existed then
      redis.call('DEL', set, units)
    end
    return
  end
  redis.call('HSET', units, 'held', fmt(held), 'seen', fmt(at))
  expire_beside(set, units, last, grace_ms)
end

-- The end of the block on `state` (the state key), or nil when it is not
-- blocked at now; false and an error reply for a block that does not parse.
local function block_of(state)
  local raw = redis.call('GET', state)
  if not raw or string.byte(raw, 1) ~= 66 then
    return nil
  end
  local ends = split_block(raw)
  if not ends then
    return false, malformed('blocked', state)
  end
  if ends > now then
    return ends
  end
  return nil
end

-- Applies `op` at now to the permits in `set` and `units` of the key
-- whose state key is `state`. Returns the operation's five numbers, or
-- false and an error reply.
local function permit_op(state, set, units, grace_ms, op, limit, ttl, id, cost)
  local acquires = op == 'acquire' or op == 'peek'
  if not acquires and op ~= 'release' and op ~= 'extend' then
    return false, redis.error_reply('TOLLGATE unknown permit operation ' .. tostring(op))
  end

  -- The key's time and the units its unexpired permits hold.
  local meta = redis.call('HMGET', units, 'held', 'seen')
  local held, at = number(meta[1] or '') or 0, now
  local seen = number(meta[2] or '')
  if seen and seen > at then
    at = seen
  end
  held = drop_expired(set, units, at, held)

  local done, retry_after, expires_in = 0, -1, -1
  local ends, err, known = nil, nil, nil
  if acquires then
    ends, err = block_of(state)
    if ends == false then
      return false, err
    end
  end
  if op ~= 'peek' then
    -- After the drop, a permit still scored is unexpired.
    known = redis.call('ZSCORE', set, id)
  end
  if ends then
    -- Blocked: the peek's numbers, denied until the block ends.
    done = -1
  elseif op == 'acquire' and known then
    -- The same acquisition asked again: admitted, holding nothing more.
    done, expires_in = 1, number(known) - at
  elseif acquires then
    local asked = math.max(cost, 1)
    if asked <= limit and held + asked <= limit then
      done = 1
      if op == 'acquire' and cost > 0 then
        redis.call('ZADD', set, fmt(at + ttl), id)
        redis.call('HSET', units, id, fmt(cost))
        held, expires_in = held + cost, ttl
      end
    elseif asked <= limit then
      retry_after = wait_for(set, units, at, held, asked, limit)
    end
  elseif op == 'release' then
    if known then
      redis.call('ZREM', set, id)
      held = held - (number(redis.call('HGET', units, id) or '') or 0)
      redis.call('HDEL', units, id)
      done = 1
    end
  elseif known then
    redis.call('ZADD', set, fmt(at + ttl), id)
    done, expires_in = 1, ttl
  end

  -- Never below zero, were a cost missing from the hash.
  if held < 0 then
    held = 0
  end
  local last = last_expiry(set)
  keep(set, units, held, at, last, grace_ms, seen ~= nil)
  local reset = last and last - at or 0
  if done == -1 then
    return { -1, ends - now, reset, 0, 0 }
  end
  return { done, held, reset, retry_after, expires_in }
end

local function permits(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local grace_ms = numbers[ARGV[2]] or arg(ARGV[2])
  -- Applies operation i: its five numbers, or false and an error reply.
  local function apply(i)
    local k, a = 3 * i, 5 * i
    return permit_op(KEYS[k - 2], KEYS[k - 1], KEYS[k], grace_ms, ARGV[a - 2],
      numbers[ARGV[a - 1]] or arg(ARGV[a - 1]), numbers[ARGV[a]] or arg(ARGV[a]), ARGV[a + 1],
      numbers[ARGV[a + 2]] or arg(ARGV[a + 2]))
  end
  local count = #KEYS / 3
  if count == 1 then
    local answer, err = apply(1)
    return answer or err
  end
  local reply = {}
  for i = 1, count do
    local ok, answer = pcall(apply, i)
    if not ok or not answer then
      answer = { -2, 0, 0, 0, 0 }
    end
    for j = 1, 5 do
      reply[5 * (i - 1) + j] = answer[j]
    end
  end
  return reply
end
