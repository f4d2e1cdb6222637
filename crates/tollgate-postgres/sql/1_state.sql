-- tollgate schema version 1: the state table and the lessees table
-- (below). One row per state key (a rate-limit key's state under one
-- limit, named as the key layout names Redis keys). Times are
-- microseconds since the Unix epoch.
--
--   key      the state key
--   a, b, c  the strategy's state, NULL a for none: a fixed window's
--            (start, count), a sliding window's (start, curr, prev), a
--            bucket's (tat)
--   blocked  the end of a block on the key, NULL for none
--   expires  when the row may go, on the database's clock: the state's
--            expiry (or the block's end, if later) plus the grace
CREATE TABLE IF NOT EXISTS @schema@.state (
  key bytea PRIMARY KEY,
  a bigint,
  b bigint,
  c bigint,
  blocked bigint,
  expires bigint NOT NULL
) WITH (fillfactor = 80);

-- The processes leasing a key: one row per lessee of the key's first state
-- key, counted while the decision's time is before `until`; the row may go
-- at `expires`, on the database's clock (the lease's age plus the grace).
CREATE TABLE IF NOT EXISTS @schema@.lessees (
  key bytea NOT NULL,
  lessee bigint NOT NULL,
  until bigint NOT NULL,
  expires bigint NOT NULL,
  PRIMARY KEY (key, lessee)
);
