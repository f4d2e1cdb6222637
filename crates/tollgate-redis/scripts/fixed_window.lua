-- tollgate: fixed window. State: "bucket:count", the clock-aligned bucket
-- floor(now / W) and the units charged in it. Port of
-- crates/tollgate/src/strategy/fixed_window.rs.

local raw = redis.call('GET', key)
local t = now
local bucket = floor_div(now, window)
local count = 0
if raw then
  local s = parse(raw, 2)
  if not s then
    return malformed('fixed-window')
  end
  if s[1] > bucket then
    -- The clock went backwards: stay in the stored bucket, at its start.
    bucket = s[1]
    t = s[1] * window
  end
  if s[1] == bucket then
    count = s[2]
  end
end

local bucket_end = (bucket + 1) * window
local unit = math.max(cost, 1)
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
  new = fmt(bucket) .. ':' .. fmt(count)
end
save(raw, new, bucket_end)

return { allowed and 1 or 0, math.max(0, limit - count), reset, retry_after }
