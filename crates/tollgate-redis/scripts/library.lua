-- tollgate: the end of the function library, after the prelude, every
-- strategy file, single.lua, compound.lua, together.lua, operate.lua,
-- lease.lua, reserve.lua, permits.lua and holds.lua. Loaded once per
-- server with FUNCTION LOAD, the library's local functions are created once
-- instead of on every call, as a script's are. The last line, added when
-- the library is built, calls `register` with the prefix of every
-- function's name: the library's name and an underscore. The library's
-- name ends with a digest of its text, so versions that differ never
-- replace each other's functions.
--
-- <prefix>fixed_window, <prefix>sliding_window, <prefix>gcra: a policy of
-- one limit, as single.lua; <prefix>batch_fixed_window and the others:
-- several decisions of such a policy, as single.lua's batch; <prefix>compound: several limits, as
-- compound.lua (and a report charged whether admitted or not, for any
-- policy); <prefix>together: several parts of one request, as
-- together.lua; <prefix>operate: a per-key operation, as operate.lua;
-- <prefix>lease: a request asking for a lease, as lease.lua;
-- <prefix>reserve and <prefix>cancel: a reservation and its cancel, as
-- reserve.lua; <prefix>permits: operations on keys' permits under
-- concurrency limits, one or several, as permits.lua; <prefix>hold and <prefix>settle: a
-- hold and its settle, as holds.lua.

local function register(prefix)
  redis.register_function(prefix .. 'fixed_window', function(keys, args)
    return single(fixed_window, keys, args)
  end)
  redis.register_function(prefix .. 'sliding_window', function(keys, args)
    return single(sliding_window, keys, args)
  end)
  redis.register_function(prefix .. 'gcra', function(keys, args)
    return single(gcra, keys, args)
  end)
  redis.register_function(prefix .. 'batch_fixed_window', function(keys, args)
    return batch(fixed_window, keys, args)
  end)
  redis.register_function(prefix .. 'batch_sliding_window', function(keys, args)
    return batch(sliding_window, keys, args)
  end)
  redis.register_function(prefix .. 'batch_gcra', function(keys, args)
    return batch(gcra, keys, args)
  end)
  redis.register_function(prefix .. 'compound', compound)
  redis.register_function(prefix .. 'together', together)
  redis.register_function(prefix .. 'operate', operate)
  redis.register_function(prefix .. 'lease', lease)
  redis.register_function(prefix .. 'reserve', reserve)
  redis.register_function(prefix .. 'cancel', cancel)
  redis.register_function(prefix .. 'permits', permits)
  redis.register_function(prefix .. 'hold', hold)
  redis.register_function(prefix .. 'settle', settle)
end

