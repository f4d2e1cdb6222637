
-- tollgate: the main part of a request of several parts decided as one step
-- (an Envoy request's descriptors, each a policy of one or more limits on
-- its own key). It follows the prelude and every strategy file, and defines
-- `together(KEYS, ARGV)`. It also follows compound.lua, whose table of
-- strategy functions by name it uses.
--
-- KEYS     every part's state keys, part after part, each part's in its
--          policy's limit order; all in one Redis Cluster hash slot. Two
--          parts may name the same keys (the same limit and key twice in one
--          request): they share one state.
-- ARGV[2]  milliseconds added to every expiry (grace for caller clocks)
-- ARGV[3]  the number of parts
-- then for each part: its cost (clamped to its largest L + 1), whether its
--          denial denies the request (1, or 0 for a part in shadow mode),
--          its number of limits n, and for each limit its strategy
--          function, L, W and T, as for a compound policy
--
-- The parts are decided in order, each as a compound policy (admitted iff
-- every limit admits) against the states the earlier parts left: a part
-- that admits charges its limits, one that denies charges nothing. The
-- first part that denies and counts (a blocked key denies) denies the
-- request, and then nothing at all is charged: that part reports its
-- denial, and every other part is decided alone against the stored states,
-- reporting its denial or, when it would be admitted, its uncharged state
-- as a peek sees it (the answers a request of that part alone would get,
-- without its charge). Every state is saved as its function leaves it,
-- brought forward to now, as the single and compound entry points do.
--
-- Returns, for each part in order, the microseconds left of its key's
-- block (0 when not blocked) followed by allowed (0 or 1), remaining,
-- reset_us and retry_after_us (-1 for none) of each of its limits; for a
-- blocked part the four numbers are a peek's.

local function together(KEYS, ARGV)
  local bad_clock = read_clock(ARGV[1])
  if bad_clock then
    return bad_clock
  end
  local grace_ms = numbers[ARGV[2]] or arg(ARGV[2])
  local part_count = tonumber(ARGV[3])
  if not part_count then
    return redis.error_reply('TOLLGATE part count is not a number: ' .. tostring(ARGV[3]))
  end

  -- The parts as sent: cost, decisive, and per limit its key's index,
  -- strategy function and L, W, T.
  local parts = {}
  local a, k = 4, 1
  for p = 1, part_count do
    local part = {
      cost = numbers[ARGV[a]] or arg(ARGV[a]),
      decisive = ARGV[a + 1] == '1',
      limits = {},
    }
    local n = tonumber(ARGV[a + 2])
    if not n or not part.cost then
      return redis.error_reply('TOLLGATE malformed part ' .. p)
    end
    a = a + 3
    for i = 1, n do
      local decide = strategies[ARGV[a]]
      if not decide then
        return redis.error_reply('TOLLGATE unknown strategy function ' .. tostring(ARGV[a]))
      end
      part.limits[i] = {
        key = KEYS[k],
        decide = decide,
        limit = numbers[ARGV[a + 1]] or arg(ARGV[a + 1]),
        window = window_of(ARGV[a + 2]),
        interval = numbers[ARGV[a + 3]] or arg(ARGV[a + 3]),
      }
      a, k = a + 4, k + 1
    end
    parts[p] = part
  end
  if k - 1 ~= #KEYS then
    return redis.error_reply('TOLLGATE the parts name ' .. (k - 1) .. ' keys, the call ' .. #KEYS)
  end

  -- Every distinct key's stored value, its state (a block split off) and
  -- the end of its block (0: none).
  local raws, stored, blocks = {}, {}, {}
  for _, key in ipairs(KEYS) do
    if raws[key] == nil then
      local raw = redis.call('GET', key)
      local state, ends = raw, 0
      if raw and string.byte(raw, 1) == 66 then
        ends, state = split_block(raw)
        if not ends then
          return malformed('blocked', key)
        end
      end
      raws[key], stored[key], blocks[key] = raw or false, state or false, ends
    end
  end

  -- Decides `part` for `cost` against `states` (a key's state, false for
  -- none), writing its reply from `at`; returns whether it admits, and
  -- when it does the new states and expiries of its keys. On a malformed
  -- state returns nil and the error reply.
  local reply = {}
  local function decide(part, cost, states, at)
    local blocked_until = 0
    for _, l in ipairs(part.limits) do
      blocked_until = math.max(blocked_until, blocks[l.key])
    end
    local blocked = blocked_until > now
    reply[at] = blocked and blocked_until - now or 0
    local c = blocked and 0 or cost
    local admits, news, expiries = not blocked, {}, {}
    for i, l in ipairs(part.limits) do
      local allowed, remaining, reset, retry_after, new, expires_at =
        l.decide(states[l.key] or nil, l.limit, l.window, l.interval, c)
      if allowed == nil then
        return nil, malformed(remaining, l.key)
      end
      local o = at + 4 * i - 3
      reply[o], reply[o + 1], reply[o + 2], reply[o + 3] = allowed, remaining, reset, retry_after
      news[i], expiries[i] = new, expires_at
      admits = admits and allowed == 1
    end
    -- A part that denies charges nothing: a limit that admitted reports
    -- its uncharged state, as a peek sees it.
    if not admits and c > 0 then
      for i, l in ipairs(part.limits) do
        local o = at + 4 * i - 3
        if reply[o] == 1 then
          local allowed, remaining, reset, retry_after, new, expires_at =
            l.decide(states[l.key] or nil, l.limit, l.window, l.interval, 0)
          reply[o], reply[o + 1], reply[o + 2], reply[o + 3] = allowed, remaining, reset, retry_after
          news[i], expiries[i] = new, expires_at
        end
      end
    end
    return admits, news, expiries
  end

  -- In order, each part against what the earlier ones left.
  local states, expiry = {}, {}
  for key, state in pairs(stored) do
    states[key] = state
  end
  local at, starts, denial = 1, {}, nil
  for p, part in ipairs(parts) do
    starts[p] = at
    local admits, news, expiries = decide(part, part.cost, states, at)
    if admits == nil then
      return news
    end
    for i, l in ipairs(part.limits) do
      states[l.key], expiry[l.key] = news[i] or false, expiries[i]
    end
    at = at + 1 + 4 * #part.limits
    if not admits and part.decisive then
      denial = p
      break
    end
  end

  if denial then
    -- Nothing charged: every other part alone against the stored states,
    -- and every key saved as a peek brings it forward.
    for p, part in ipairs(parts) do
      starts[p] = starts[p] or at
      if p ~= denial then
        local admits, news = decide(part, part.cost, stored, starts[p])
        if admits == nil then
          return news
        end
        if admits and part.cost > 0 then
          decide(part, 0, stored, starts[p])
        end
      end
      if p > denial then
        at = at + 1 + 4 * #part.limits
      end
    end
    for _, part in ipairs(parts) do
      for _, l in ipairs(part.limits) do
        local _, _, _, _, new, expires_at = l.decide(stored[l.key] or nil, l.limit, l.window, l.interval, 0)
        states[l.key], expiry[l.key] = new or false, expires_at
      end
    end
  end

  -- A running block keeps its value untouched; an expired one is dropped
  -- by the write.
  for key, raw in pairs(raws) do
    if blocks[key] <= now then
      save(key, raw or nil, states[key] or nil, expiry[key], grace_ms)
    end
  end
  return reply
end
