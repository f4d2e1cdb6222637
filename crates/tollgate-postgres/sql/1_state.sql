-- tollgate schema version 1: the state table. One row per state key (a
-- rate-limit key's state under one limit, named as the key layout names
-- Redis keys). Times are microseconds since the Unix epoch.
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
