-- tollgate schema version 4: decisions of a policy of one fixed window
-- (no calendar), the most common limit, in one PL/pgSQL loop of plain
-- statements and expressions (the core's fixed_window written out, no
-- nested function calls or composite values per request), and a lock of
-- one key without sorting.

-- Locks every key of `keys` for the rest of the transaction, as version 3
-- does: one key directly, several in the order of their hashes.
CREATE OR REPLACE FUNCTION @schema@.lock_keys(keys bytea[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF cardinality(keys) = 1 THEN
    PERFORM pg_advisory_xact_lock(hash_array_extended(keys, 7523805364410236));
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock(h) FROM (
    SELECT DISTINCT hash_array_extended(ARRAY[k], 7523805364410236) AS h
      FROM unnest(keys) AS k ORDER BY 1) AS hashes;
END $$;

-- decide() for a policy of one fixed window of fixed length (kinds {1},
-- spans all zero) without `charge`: the same arguments, the same replies,
-- each request decided in order exactly as alone (fixed_window and
-- fixed_window_bucket of version 2, and decide()'s reads and writes). Any
-- other call is decide()'s.
CREATE OR REPLACE FUNCTION @schema@.decide_fixed_window(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], costs bigint[], charge bigint, grace bigint, at bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  m int := cardinality(costs);
  lim bigint := lims[1];
  win bigint := wins[1];
  db_now bigint;
  tnow bigint;
  reply bigint[] := '{}';
  k bytea;
  cost bigint;
  unit bigint;
  -- The row as read (NULLs when absent or expired; had: a row is there).
  a bigint; b bigint; blk bigint; until_db bigint; had boolean;
  -- The window at tnow: its start, count, the time within it, its end.
  start bigint; n bigint; within bigint; fin bigint;
  ok boolean;
BEGIN
  IF cardinality(kinds) <> 1 OR kinds[1] <> 1 OR spans[4] <> 0 OR charge IS NOT NULL
     OR cardinality(keys) <> m OR m = 0 THEN
    RETURN @schema@.decide(kinds, lims, wins, intvs, spans, keys, costs, charge, grace, at);
  END IF;
  PERFORM @schema@.lock_keys(keys);
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  FOR r IN 1..m LOOP
    k := keys[r]; cost := costs[r]; unit := greatest(cost, 1);
    SELECT t.a, t.b, t.blocked, t.expires INTO a, b, blk, until_db
      FROM @schema@.state AS t WHERE t.key = k;
    had := FOUND;
    IF NOT had OR until_db <= db_now THEN
      a := NULL; b := NULL; blk := NULL;
    END IF;
    -- The stored window while it runs (or, the clock back before it, at
    -- its start), else a new one from now.
    IF a IS NOT NULL AND tnow - a < win THEN
      start := a; n := b; within := greatest(tnow, a);
    ELSE
      start := tnow - tnow % win; n := 0; within := tnow;
    END IF;
    fin := start + win;
    IF blk > tnow THEN
      -- Blocked: denied, nothing charged, nothing written.
      reply := reply || ARRAY[-1, blk - tnow, CASE WHEN n > 0 THEN fin - within ELSE 0 END, 0];
      CONTINUE;
    END IF;
    ok := unit <= lim AND n <= lim - unit;
    IF ok THEN
      n := n + cost;
    END IF;
    reply := reply || ARRAY[CASE WHEN ok THEN 1 ELSE 0 END, greatest(lim - n, 0),
      CASE WHEN n > 0 THEN fin - within ELSE 0 END,
      CASE WHEN NOT ok AND unit <= lim THEN fin - within ELSE -1 END];
    -- Nothing left: the row goes; changed (or an ended block): written.
    IF n = 0 THEN
      IF had THEN
        DELETE FROM @schema@.state AS t WHERE t.key = k;
      END IF;
    ELSIF a IS DISTINCT FROM start OR b IS DISTINCT FROM n OR blk IS NOT NULL THEN
      INSERT INTO @schema@.state AS t VALUES (k, start, n, NULL, NULL, db_now + greatest(fin - tnow, 1) + grace)
        ON CONFLICT ON CONSTRAINT state_pkey DO UPDATE
        SET a = EXCLUDED.a, b = EXCLUDED.b, c = NULL, blocked = NULL, expires = EXCLUDED.expires;
    END IF;
  END LOOP;
  RETURN reply;
END $$;
