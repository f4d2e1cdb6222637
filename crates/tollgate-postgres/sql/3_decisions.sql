-- tollgate schema version 3: decisions, operations, reservations and
-- leases on the state table (and the lessees table), each call one
-- transaction.
--
-- Mutual exclusion: a call first takes a transaction-scoped advisory lock
-- on the 64-bit hash of every state key it names, all in one statement in
-- the hashes' order, so two calls never wait for each other in a cycle.
-- Then it reads the clock (the database's, unless the caller sends one),
-- so that calls on one key see increasing times. A row whose `expires` has
-- passed reads as no row, and the write of a decision reuses it.

-- The database's clock in microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION @schema@.clock() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- Locks every key of `keys` for the rest of the transaction.
CREATE OR REPLACE FUNCTION @schema@.lock_keys(keys bytea[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(h) FROM (
    SELECT DISTINCT hash_array_extended(ARRAY[k], 7523805364410236) AS h
      FROM unnest(keys) AS k ORDER BY 1) AS hashes;
END $$;

-- The time a decision is made at: `at` when the caller sends one, the
-- database's clock otherwise; refused out of [0, 2^52).
CREATE OR REPLACE FUNCTION @schema@.decision_time(at bigint, db_now bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF coalesce(at, db_now) < 0 OR coalesce(at, db_now) >= 4503599627370496 THEN
    RAISE EXCEPTION 'tollgate: clock reading out of range: %', coalesce(at, db_now)
      USING ERRCODE = 'TG003';
  END IF;
  RETURN coalesce(at, db_now);
END $$;

-- Stores the state `s` of `key` after a decision or an operation at `tnow`
-- (`db_now` on the database's clock), with a block ending at `blocked`
-- (NULL, or not after tnow: none): deletes the row when nothing is left,
-- writes nothing when nothing changed (`old` is the row as read, NULL
-- when absent or expired; `had_row` whether a row, even expired, is there).
CREATE OR REPLACE FUNCTION @schema@.save(
  key bytea, had_row boolean, old @schema@.state, s @schema@.step, blocked bigint,
  tnow bigint, db_now bigint, grace bigint)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  ends bigint := CASE WHEN blocked > tnow THEN blocked END;
  until_db bigint;
BEGIN
  IF s.a IS NULL AND ends IS NULL THEN
    IF had_row THEN
      DELETE FROM @schema@.state AS t WHERE t.key = save.key;
    END IF;
    RETURN;
  END IF;
  IF old.key IS NOT NULL AND old.a IS NOT DISTINCT FROM s.a AND old.b IS NOT DISTINCT FROM s.b
     AND old.c IS NOT DISTINCT FROM s.c AND old.blocked IS NOT DISTINCT FROM ends THEN
    RETURN;
  END IF;
  until_db := CASE WHEN s.a IS NULL THEN ends ELSE greatest(s.expires, coalesce(ends, 0)) END;
  until_db := db_now + greatest(until_db - tnow, 1) + grace;
  INSERT INTO @schema@.state AS t VALUES (save.key, s.a, s.b, s.c, ends, until_db)
    ON CONFLICT ON CONSTRAINT state_pkey DO UPDATE
    SET a = s.a, b = s.b, c = s.c, blocked = ends, expires = until_db;
END $$;

-- Decides requests of one policy, each as one step over the policy's n
-- limits (kinds, lims, wins, intvs: limit i's strategy number, L, W, T;
-- spans: four calendar boundaries per limit, zeros for a window of fixed
-- length). Request r asks costs[r] units under the n state keys
-- keys[n(r-1)+1 .. nr]; requests are decided in order, each exactly as
-- alone. A request is admitted when every limit admits it, and then
-- charged on every limit; denied, it charges nothing, unless `charge` is
-- set (usage reported after the fact): then every limit is charged
-- `charge` units whatever the decision.
--
-- Returns 4n numbers per request, limit by limit: allowed (1 or 0),
-- remaining, reset and retry_after (-1 for none) in microseconds; with
-- `charge`, one more: 1 when every limit admitted. A blocked request's
-- four first numbers are -1, the microseconds left of the block, the
-- latest reset of its limits, and 0 (the rest 0): it is denied, charged
-- nothing, and nothing is written.
CREATE OR REPLACE FUNCTION @schema@.decide(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], costs bigint[], charge bigint, grace bigint, at bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  n int := cardinality(kinds);
  m int := cardinality(costs);
  db_now bigint;
  tnow bigint;
  reply bigint[] := '{}';
  out int := 0;
  -- Limit i's row as read (NULL a: no state; had: a row is there) and
  -- its step: parallel arrays of scalars, which PL/pgSQL updates in place.
  ra bigint[]; rb bigint[]; rc bigint[]; rblk bigint[]; had boolean[];
  sa bigint[]; sb bigint[]; sc bigint[]; sexp bigint[];
  sok boolean[]; srem bigint[]; sreset bigint[]; sretry bigint[];
  va bigint; vb bigint; vc bigint; vblk bigint;
  st @schema@.step;
  span bigint[];
  k bytea;
  base int;
  ends bigint;
  latest bigint;
  all_in boolean;
  cost bigint;
  until_db bigint;
BEGIN
  IF n = 0 OR cardinality(keys) <> n * m OR cardinality(spans) <> 4 * n THEN
    RAISE EXCEPTION 'tollgate: % keys and % spans for % limits and % requests',
      cardinality(keys), cardinality(spans), n, m USING ERRCODE = 'TG004';
  END IF;
  PERFORM @schema@.lock_keys(keys);
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  FOR r IN 1..m LOOP
    base := n * (r - 1);
    cost := costs[r];
    ends := 0;
    FOR i IN 1..n LOOP
      k := keys[base + i];
      SELECT t.a, t.b, t.c, t.blocked, t.expires INTO va, vb, vc, vblk, until_db
        FROM @schema@.state AS t WHERE t.key = k;
      had[i] := FOUND;
      IF NOT FOUND OR until_db <= db_now THEN
        va := NULL; vb := NULL; vc := NULL; vblk := NULL;
      END IF;
      ra[i] := va; rb[i] := vb; rc[i] := vc; rblk[i] := vblk;
      ends := greatest(ends, coalesce(rblk[i], 0));
    END LOOP;
    IF ends > tnow THEN
      -- Blocked: denied, nothing charged, nothing written.
      latest := 0;
      FOR i IN 1..n LOOP
        span := CASE WHEN spans[4 * i] = 0 THEN NULL ELSE spans[4 * i - 3 : 4 * i] END;
        st := @schema@.step(kinds[i], ra[i], rb[i], rc[i], lims[i], wins[i], intvs[i], span, tnow, 0);
        latest := greatest(latest, st.reset);
      END LOOP;
      reply[out + 1] := -1; reply[out + 2] := ends - tnow; reply[out + 3] := latest;
      FOR j IN out + 4 .. out + 4 * n LOOP
        reply[j] := 0;
      END LOOP;
      out := out + 4 * n;
      IF charge IS NOT NULL THEN
        out := out + 1; reply[out] := 0;
      END IF;
      CONTINUE;
    END IF;
    all_in := true;
    FOR i IN 1..n LOOP
      span := CASE WHEN spans[4 * i] = 0 THEN NULL ELSE spans[4 * i - 3 : 4 * i] END;
      st := CASE kinds[i]
        WHEN 1 THEN @schema@.fixed_window(ra[i], rb[i], rc[i], lims[i], wins[i], intvs[i], span, tnow, cost)
        WHEN 2 THEN @schema@.sliding_window(ra[i], rb[i], rc[i], lims[i], wins[i], intvs[i], span, tnow, cost)
        ELSE @schema@.step(kinds[i], ra[i], rb[i], rc[i], lims[i], wins[i], intvs[i], span, tnow, cost)
      END;
      sok[i] := st.allowed; srem[i] := st.remaining; sreset[i] := st.reset; sretry[i] := st.retry;
      sa[i] := st.a; sb[i] := st.b; sc[i] := st.c; sexp[i] := st.expires;
      all_in := all_in AND st.allowed;
    END LOOP;
    IF NOT all_in AND cost > 0 THEN
      -- Denied: a limit that admitted is peeked instead (nothing charged),
      -- unless the usage is charged whatever the decision.
      FOR i IN 1..n LOOP
        CONTINUE WHEN NOT (sok[i] OR coalesce(charge, 0) > 0);
        span := CASE WHEN spans[4 * i] = 0 THEN NULL ELSE spans[4 * i - 3 : 4 * i] END;
        IF coalesce(charge, 0) > 0 THEN
          st := @schema@.adjust(kinds[i], ra[i], rb[i], rc[i], lims[i], wins[i], intvs[i], span, tnow, charge);
          st := @schema@.step(kinds[i], st.a, st.b, st.c, lims[i], wins[i], intvs[i], span, tnow, 0);
        ELSE
          st := @schema@.step(kinds[i], ra[i], rb[i], rc[i], lims[i], wins[i], intvs[i], span, tnow, 0);
        END IF;
        sok[i] := st.allowed; srem[i] := st.remaining; sreset[i] := st.reset; sretry[i] := st.retry;
        sa[i] := st.a; sb[i] := st.b; sc[i] := st.c; sexp[i] := st.expires;
      END LOOP;
    END IF;
    FOR i IN 1..n LOOP
      reply[out + 1] := CASE WHEN sok[i] THEN 1 ELSE 0 END;
      reply[out + 2] := srem[i]; reply[out + 3] := sreset[i]; reply[out + 4] := sretry[i];
      out := out + 4;
      -- The block, if any, has ended: it is dropped with the write.
      IF sa[i] IS NULL THEN
        IF had[i] THEN
          DELETE FROM @schema@.state AS t WHERE t.key = keys[base + i];
        END IF;
      ELSIF ra[i] IS DISTINCT FROM sa[i] OR rb[i] IS DISTINCT FROM sb[i] OR rc[i] IS DISTINCT FROM sc[i]
            OR rblk[i] IS NOT NULL THEN
        until_db := db_now + greatest(sexp[i] - tnow, 1) + grace;
        INSERT INTO @schema@.state AS t VALUES (keys[base + i], sa[i], sb[i], sc[i], NULL, until_db)
          ON CONFLICT ON CONSTRAINT state_pkey DO UPDATE
          SET a = EXCLUDED.a, b = EXCLUDED.b, c = EXCLUDED.c, blocked = NULL, expires = EXCLUDED.expires;
      END IF;
    END LOOP;
    IF charge IS NOT NULL THEN
      out := out + 1; reply[out] := CASE WHEN all_in THEN 1 ELSE 0 END;
    END IF;
  END LOOP;
  RETURN reply;
END $$;

-- Limit i's calendar boundaries from the four per limit, NULL for zeros.
CREATE OR REPLACE FUNCTION @schema@.span(spans bigint[], i int) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN spans[4 * i] = 0 THEN NULL ELSE spans[4 * i - 3 : 4 * i] END
$$;

-- A per-key operation on every limit of a policy, as one step: 'reset'
-- deletes the key's rows (ending a block); 'refund' and 'penalty' change
-- each limit's state by `amount` units and keep a running block; 'block'
-- blocks the key for `amount` microseconds from now (0 lifts a block) and
-- keeps its state as a peek brings it forward.
CREATE OR REPLACE FUNCTION @schema@.operate(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], op text, amount bigint, grace bigint, at bigint)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  db_now bigint;
  tnow bigint;
  cur @schema@.state;
  had boolean;
  st @schema@.step;
  ends bigint;
BEGIN
  IF op NOT IN ('reset', 'block', 'refund', 'penalty') THEN
    RAISE EXCEPTION 'tollgate: unknown operation %', op USING ERRCODE = 'TG005';
  END IF;
  PERFORM @schema@.lock_keys(keys);
  IF op = 'reset' THEN
    DELETE FROM @schema@.state AS t WHERE t.key = ANY(keys);
    RETURN;
  END IF;
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  FOR i IN 1..cardinality(kinds) LOOP
    SELECT * INTO cur FROM @schema@.state AS t WHERE t.key = keys[i];
    had := FOUND;
    IF NOT FOUND OR cur.expires <= db_now THEN
      cur := NULL;
    END IF;
    ends := cur.blocked;
    IF op = 'block' THEN
      ends := tnow + amount;
      st := @schema@.step(kinds[i], cur.a, cur.b, cur.c, lims[i], wins[i], intvs[i],
        @schema@.span(spans, i), tnow, 0);
    ELSE
      st := @schema@.adjust(kinds[i], cur.a, cur.b, cur.c, lims[i], wins[i], intvs[i],
        @schema@.span(spans, i), tnow, CASE WHEN op = 'refund' THEN -amount ELSE amount END);
    END IF;
    PERFORM @schema@.save(keys[i], had, cur, st, ends, tnow, db_now, grace);
  END LOOP;
END $$;

-- The row of `key` as a call reads it at `db_now`: all NULL when there is
-- none; its state and block NULL when it has expired (its key kept: a row
-- is there, which a write reuses).
CREATE OR REPLACE FUNCTION @schema@.read_row(key bytea, db_now bigint) RETURNS @schema@.state
LANGUAGE plpgsql STABLE AS $$
DECLARE
  cur @schema@.state;
BEGIN
  SELECT * INTO cur FROM @schema@.state AS t WHERE t.key = read_row.key;
  IF FOUND AND cur.expires <= db_now THEN
    cur.a := NULL; cur.b := NULL; cur.c := NULL; cur.blocked := NULL;
  END IF;
  RETURN cur;
END $$;

-- The rows of `keys` as a call reads them at `db_now` (read_row), their
-- states a, b and c as arrays, and the latest end of a block among them
-- (0 when none).
CREATE OR REPLACE FUNCTION @schema@.read_rows(
  keys bytea[], db_now bigint,
  OUT olds @schema@.state[], OUT sa bigint[], OUT sb bigint[], OUT sc bigint[], OUT ends bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  ends := 0;
  FOR i IN 1..cardinality(keys) LOOP
    olds[i] := @schema@.read_row(keys[i], db_now);
    sa[i] := (olds[i]).a; sb[i] := (olds[i]).b; sc[i] := (olds[i]).c;
    ends := greatest(ends, coalesce((olds[i]).blocked, 0));
  END LOOP;
END $$;

-- Refuses keys and spans that do not fit n limits and one request.
CREATE OR REPLACE FUNCTION @schema@.check_shape(keys bytea[], spans bigint[], n int) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF n = 0 OR cardinality(keys) <> n OR cardinality(spans) <> 4 * n THEN
    RAISE EXCEPTION 'tollgate: % keys and % spans for % limits',
      cardinality(keys), cardinality(spans), n USING ERRCODE = 'TG004';
  END IF;
END $$;

-- The reply of a call on a key blocked until `ends` (as decide gives it:
-- -1, the microseconds left, the latest reset of a peek at the states a,
-- b, c, then zeros to 4n numbers), or NULL when the block is not running
-- at `tnow`.
CREATE OR REPLACE FUNCTION @schema@.blocked_reply(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  a bigint[], b bigint[], c bigint[], ends bigint, tnow bigint)
RETURNS bigint[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  n int := cardinality(kinds);
  latest bigint := 0;
  reply bigint[];
BEGIN
  IF ends <= tnow THEN
    RETURN NULL;
  END IF;
  FOR i IN 1..n LOOP
    latest := greatest(latest, (@schema@.step(kinds[i], a[i], b[i], c[i], lims[i], wins[i], intvs[i],
      @schema@.span(spans, i), tnow, 0)).reset);
  END LOOP;
  reply := array_fill(0::bigint, ARRAY[4 * n]);
  reply[1] := -1; reply[2] := ends - tnow; reply[3] := latest;
  RETURN reply;
END $$;

-- Decides `cost` units on every limit as one step from the states a, b, c
-- at `tnow`, as decide does (the core's decide_all): each limit's step,
-- a limit that admitted peeked instead when another denies.
CREATE OR REPLACE FUNCTION @schema@.decide_all(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  a bigint[], b bigint[], c bigint[], tnow bigint, cost bigint)
RETURNS @schema@.step[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  steps @schema@.step[];
  all_in boolean := true;
BEGIN
  FOR i IN 1..cardinality(kinds) LOOP
    steps[i] := @schema@.step(kinds[i], a[i], b[i], c[i], lims[i], wins[i], intvs[i],
      @schema@.span(spans, i), tnow, cost);
    all_in := all_in AND (steps[i]).allowed;
  END LOOP;
  IF NOT all_in AND cost > 0 THEN
    FOR i IN 1..cardinality(kinds) LOOP
      CONTINUE WHEN NOT (steps[i]).allowed;
      steps[i] := @schema@.step(kinds[i], a[i], b[i], c[i], lims[i], wins[i], intvs[i],
        @schema@.span(spans, i), tnow, 0);
    END LOOP;
  END IF;
  RETURN steps;
END $$;

-- Whether every step admitted.
CREATE OR REPLACE FUNCTION @schema@.all_allowed(steps @schema@.step[]) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT bool_and(s.allowed) FROM unnest(steps) AS s
$$;

-- Four numbers per step, as decide replies: allowed (1 or 0), remaining,
-- reset, retry_after (-1 for none).
CREATE OR REPLACE FUNCTION @schema@.outcomes(steps @schema@.step[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(x ORDER BY o, j), '{}') FROM unnest(steps) WITH ORDINALITY AS s(
      allowed, remaining, reset, retry, a, b, c, expires, o),
    LATERAL unnest(ARRAY[CASE WHEN s.allowed THEN 1 ELSE 0 END, s.remaining, s.reset, s.retry])
      WITH ORDINALITY AS f(x, j)
$$;

-- Stores each step's state on its key after a call at `tnow`, any block
-- dropped (a call that charged ends a block that has ended).
CREATE OR REPLACE FUNCTION @schema@.save_all(
  keys bytea[], olds @schema@.state[], steps @schema@.step[], tnow bigint, db_now bigint, grace bigint)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  FOR i IN 1..cardinality(keys) LOOP
    PERFORM @schema@.save(keys[i], (olds[i]).key IS NOT NULL, olds[i], steps[i], NULL, tnow, db_now,
      grace);
  END LOOP;
END $$;

-- A reservation (the core's reserve_all) of `cost` units, waiting at most
-- `max_delay` microseconds, on every limit of one policy (arguments as
-- for decide, one request). When every limit is a bucket or a sliding
-- window and the cost is at most every L, the request proceeds at the
-- latest of the limits' earliest slots: refused, nothing charged, when
-- that lies beyond max_delay or at or past the end of a sliding window's
-- current window; else each bucket's tat becomes max(tat, now, proceed) +
-- cost * T and each sliding window counts the cost in its current window.
-- Otherwise it is decided as decide decides it.
--
-- Returns decide's 4n numbers (for a refusal, a peek's), then the status
-- (0 decided, 1 reserved, 2 refused beyond max_delay, 3 refused until a
-- sliding window turns), the wait (1: until the request proceeds; 2: the
-- excess over max_delay; 3: until the window turns), the index from 0 of
-- the limit that set it, the time decided at, and three numbers per limit
-- for the state a reservation left (a bucket's tat, 0, 0; a sliding
-- window's start, current and previous counts; -1s unless reserved). A
-- blocked key gets decide's blocked reply; nothing is charged.
CREATE OR REPLACE FUNCTION @schema@.reserve(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], cost bigint, max_delay bigint, grace bigint, at bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  n int := cardinality(kinds);
  db_now bigint;
  tnow bigint;
  olds @schema@.state[];
  sa bigint[]; sb bigint[]; sc bigint[];
  ends bigint;
  slot record;
  status int := 0;
  wait bigint := 0;
  bound int := 1;
  steps @schema@.step[];
  left_by bigint[];
BEGIN
  PERFORM @schema@.check_shape(keys, spans, n);
  PERFORM @schema@.lock_keys(keys);
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  SELECT * INTO olds, sa, sb, sc, ends FROM @schema@.read_rows(keys, db_now);
  IF ends > tnow THEN
    RETURN @schema@.blocked_reply(kinds, lims, wins, intvs, spans, sa, sb, sc, ends, tnow);
  END IF;
  slot := @schema@.earliest_slot(kinds, lims, wins, intvs, sa, sb, sc, tnow, cost);
  IF slot.proceed IS NOT NULL THEN
    IF slot.proceed - tnow > max_delay THEN
      status := 2; wait := slot.proceed - tnow - max_delay; bound := slot.longest;
    ELSIF slot.proceed >= slot.turns THEN
      status := 3; wait := slot.turns - tnow; bound := slot.turning;
    ELSE
      status := 1; wait := slot.proceed - tnow; bound := slot.longest;
    END IF;
  END IF;
  left_by := array_fill(-1::bigint, ARRAY[3 * n]);
  IF status = 1 THEN
    steps := @schema@.charged_at(kinds, lims, wins, intvs, sa, sb, sc, tnow, slot.proceed, cost);
    FOR i IN 1..n LOOP
      left_by[3 * i - 2] := (steps[i]).a;
      left_by[3 * i - 1] := coalesce((steps[i]).b, 0);
      left_by[3 * i] := coalesce((steps[i]).c, 0);
    END LOOP;
  ELSE
    steps := @schema@.decide_all(kinds, lims, wins, intvs, spans, sa, sb, sc, tnow,
      CASE WHEN status = 0 THEN cost ELSE 0 END);
  END IF;
  PERFORM @schema@.save_all(keys, olds, steps, tnow, db_now, grace);
  RETURN @schema@.outcomes(steps) || ARRAY[status, wait, bound - 1, tnow]::bigint[] || left_by;
END $$;

-- Where a reservation of `cost` units at `tnow` may proceed (the core's
-- earliest_slots): the latest of the limits' earliest slots and the limit
-- it is from (ties: the first), the earliest end of a sliding window's
-- current window and its limit (NULL without one). All NULL when the
-- reservation is a plain decision: a cost of 0, a fixed window among the
-- limits, or a cost above some L.
CREATE OR REPLACE FUNCTION @schema@.earliest_slot(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[],
  a bigint[], b bigint[], c bigint[], tnow bigint, cost bigint,
  OUT proceed bigint, OUT longest int, OUT turns bigint, OUT turning int)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  earliest bigint;
  st @schema@.step;
BEGIN
  IF cost <= 0 OR 1 = ANY(kinds) OR EXISTS (SELECT 1 FROM unnest(lims) AS l WHERE cost > l) THEN
    RETURN;
  END IF;
  proceed := tnow; longest := 1;
  FOR i IN 1..cardinality(kinds) LOOP
    IF kinds[i] = 2 THEN
      st := @schema@.sliding_window(a[i], b[i], c[i], lims[i], wins[i], intvs[i], NULL, tnow, cost);
      earliest := CASE WHEN st.allowed THEN tnow ELSE greatest(tnow, st.a) + st.retry END;
      IF turns IS NULL OR st.a + wins[i] < turns THEN
        turns := st.a + wins[i]; turning := i;
      END IF;
    ELSE
      earliest := tnow + greatest(
        greatest(coalesce(a[i], tnow), tnow) + cost * intvs[i] - tnow - lims[i] * intvs[i], 0);
    END IF;
    IF earliest > proceed THEN
      proceed := earliest; longest := i;
    END IF;
  END LOOP;
END $$;

-- Every limit charged `cost` as by a request admitted at `proceed` (the
-- core's charged_at): a bucket's tat becomes max(tat, tnow, proceed) +
-- cost * T, a sliding window counts the cost in its current window; each
-- step admitted, its figures as seen at `tnow`.
CREATE OR REPLACE FUNCTION @schema@.charged_at(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[],
  a bigint[], b bigint[], c bigint[], tnow bigint, proceed bigint, cost bigint)
RETURNS @schema@.step[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  steps @schema@.step[];
  st @schema@.step;
  peek @schema@.step;
  tat bigint;
BEGIN
  FOR i IN 1..cardinality(kinds) LOOP
    IF kinds[i] = 2 THEN
      st := @schema@.adjust(kinds[i], a[i], b[i], c[i], lims[i], wins[i], intvs[i], NULL, tnow, cost);
      peek := @schema@.sliding_window(st.a, st.b, st.c, lims[i], wins[i], intvs[i], NULL, tnow, 0);
      st.allowed := true; st.remaining := peek.remaining; st.reset := peek.reset; st.retry := -1;
    ELSE
      tat := greatest(coalesce(a[i], tnow), tnow, proceed) + cost * intvs[i];
      st := ROW(true, greatest(lims[i] * intvs[i] - (tat - tnow), 0) / intvs[i], tat - tnow, -1,
        tat, NULL, NULL, tat);
    END IF;
    steps[i] := st;
  END LOOP;
  RETURN steps;
END $$;

-- Gives back a reservation of `cost` units that proceeds at `proceed` and
-- left the states `left_by` (three numbers per limit, as reserve returns
-- them), when that is still possible (the core's cancel_all): before the
-- proceed time, no block running, and every limit's state still the one it
-- left. Then refunds the cost on every limit and returns true.
CREATE OR REPLACE FUNCTION @schema@.cancel(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], cost bigint, proceed bigint, left_by bigint[], grace bigint, at bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  n int := cardinality(kinds);
  db_now bigint;
  tnow bigint;
  olds @schema@.state[];
  cur @schema@.state;
  st @schema@.step;
BEGIN
  PERFORM @schema@.check_shape(keys, spans, n);
  PERFORM @schema@.lock_keys(keys);
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  IF tnow >= proceed THEN
    RETURN false;
  END IF;
  FOR i IN 1..n LOOP
    cur := @schema@.read_row(keys[i], db_now);
    IF coalesce(cur.blocked, 0) > tnow OR cur.a IS DISTINCT FROM left_by[3 * i - 2]
       OR (kinds[i] = 2 AND (cur.b IS DISTINCT FROM left_by[3 * i - 1]
                             OR cur.c IS DISTINCT FROM left_by[3 * i])) THEN
      RETURN false;
    END IF;
    olds[i] := cur;
  END LOOP;
  FOR i IN 1..n LOOP
    cur := olds[i];
    st := @schema@.adjust(kinds[i], cur.a, cur.b, cur.c, lims[i], wins[i], intvs[i],
      @schema@.span(spans, i), tnow, -cost);
    PERFORM @schema@.save(keys[i], true, cur, st, cur.blocked, tnow, db_now, grace);
  END LOOP;
  RETURN true;
END $$;

-- Counts `lessee` among the processes leasing the key whose first state
-- key is `key`, for the next `age` microseconds, and returns how many
-- there are, it included: those whose time is up go.
CREATE OR REPLACE FUNCTION @schema@.count_lessee(
  key bytea, lessee bigint, age bigint, tnow bigint, db_now bigint, grace bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  counted bigint;
BEGIN
  DELETE FROM @schema@.lessees AS t
    WHERE t.key = count_lessee.key AND (t.until <= tnow OR t.expires <= db_now);
  INSERT INTO @schema@.lessees AS t VALUES (key, lessee, tnow + age, db_now + greatest(age, 1) + grace)
    ON CONFLICT ON CONSTRAINT lessees_pkey DO UPDATE SET until = EXCLUDED.until, expires = EXCLUDED.expires;
  SELECT count(*) INTO counted FROM @schema@.lessees AS t WHERE t.key = count_lessee.key;
  RETURN counted;
END $$;

-- Gives back `units` of an ended lease (the core's give_back) on the
-- states a, b, c, in place, when `tnow` is before `before` (NULL: always);
-- a bucket gives back at most floor((before - tnow) / T) of them. Returns
-- which limits changed, with the steps that hold their states.
CREATE OR REPLACE FUNCTION @schema@.give_back(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  INOUT a bigint[], INOUT b bigint[], INOUT c bigint[], tnow bigint, units bigint, before bigint,
  OUT given @schema@.step[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k bigint;
  st @schema@.step;
BEGIN
  IF units <= 0 OR tnow >= before THEN
    RETURN;
  END IF;
  FOR i IN 1..cardinality(kinds) LOOP
    k := CASE WHEN kinds[i] IN (3, 4) AND before IS NOT NULL
              THEN least(units, (before - tnow) / greatest(intvs[i], 1)) ELSE units END;
    CONTINUE WHEN k <= 0;
    st := @schema@.adjust(kinds[i], a[i], b[i], c[i], lims[i], wins[i], intvs[i],
      @schema@.span(spans, i), tnow, -k);
    a[i] := st.a; b[i] := st.b; c[i] := st.c;
    given[i] := st;
  END LOOP;
END $$;

-- A request of `cost` units that asks for up to `want` more as a lease
-- (the core's give_back, then lease_all), as `lessee` for leases of at
-- most `age` microseconds, first giving back `units` units of an
-- ended lease before `before` (NULL: always). Arguments otherwise as for
-- decide, one request. The lessee is counted when `want` > 0; the lease
-- is extra = min(want, floor(left / (2 * lessees)) - cost) with `left` a
-- peek's smallest remaining; cost + extra units are decided as one
-- request when extra > 0, the cost alone otherwise or when that is denied.
--
-- Returns decide's 4n numbers, then extra (granted), the end of the
-- earliest window the lease was charged in and the microseconds to it
-- (-1 and -1 for none), and the time before which the lease's units are
-- given back (the core's return_before after the charge; -1 for none). A
-- blocked key gets decide's blocked reply: the units are given back and
-- the lessee counted, nothing charged or leased, the block kept.
CREATE OR REPLACE FUNCTION @schema@.lease(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], cost bigint, want bigint, lessee bigint, age bigint, units bigint, before bigint,
  grace bigint, at bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  n int := cardinality(kinds);
  db_now bigint;
  tnow bigint;
  olds @schema@.state[];
  sa bigint[]; sb bigint[]; sc bigint[];
  back record;
  ends bigint;
  lessees bigint := 1;
  extra bigint := 0;
  steps @schema@.step[];
  ends_at record;
BEGIN
  PERFORM @schema@.check_shape(keys, spans, n);
  PERFORM @schema@.lock_keys(keys);
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  SELECT * INTO olds, sa, sb, sc, ends FROM @schema@.read_rows(keys, db_now);
  back := @schema@.give_back(kinds, lims, wins, intvs, spans, sa, sb, sc, tnow, units, before);
  sa := back.a; sb := back.b; sc := back.c;
  IF want > 0 THEN
    lessees := @schema@.count_lessee(keys[1], lessee, age, tnow, db_now, grace);
  END IF;
  IF ends > tnow THEN
    FOR i IN 1..n LOOP
      CONTINUE WHEN (back.given)[i] IS NULL;
      PERFORM @schema@.save(keys[i], (olds[i]).key IS NOT NULL, olds[i], (back.given)[i], (olds[i]).blocked,
        tnow, db_now, grace);
    END LOOP;
    RETURN @schema@.blocked_reply(kinds, lims, wins, intvs, spans, sa, sb, sc, ends, tnow);
  END IF;
  IF cost > 0 AND want > 0 THEN
    steps := @schema@.decide_all(kinds, lims, wins, intvs, spans, sa, sb, sc, tnow, 0);
    extra := least(want, greatest(
      (SELECT min(s.remaining) FROM unnest(steps) AS s) / (2 * greatest(lessees, 1)) - cost, 0));
  END IF;
  IF extra > 0 THEN
    steps := @schema@.decide_all(kinds, lims, wins, intvs, spans, sa, sb, sc, tnow, cost + extra);
    IF NOT @schema@.all_allowed(steps) THEN
      extra := 0;
    END IF;
  END IF;
  IF extra = 0 THEN
    steps := @schema@.decide_all(kinds, lims, wins, intvs, spans, sa, sb, sc, tnow, cost);
  END IF;
  PERFORM @schema@.save_all(keys, olds, steps, tnow, db_now, grace);
  ends_at := @schema@.lease_ends(kinds, wins, steps);
  RETURN @schema@.outcomes(steps) || ARRAY[
    extra,
    CASE WHEN extra > 0 THEN coalesce(ends_at.window_end, -1) ELSE -1 END,
    CASE WHEN extra > 0 THEN coalesce(ends_at.window_end - tnow, -1) ELSE -1 END,
    coalesce(ends_at.return_before, -1)]::bigint[];
END $$;

-- Where the states of `steps` after a lease's charge end (the core's
-- window_end and return_before): the end of the earliest fixed or sliding
-- window holding state, and the earliest of it and each bucket's tat;
-- NULL for none.
CREATE OR REPLACE FUNCTION @schema@.lease_ends(
  kinds smallint[], wins bigint[], steps @schema@.step[],
  OUT window_end bigint, OUT return_before bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  FOR i IN 1..cardinality(kinds) LOOP
    CONTINUE WHEN (steps[i]).a IS NULL;
    CASE kinds[i]
      WHEN 1 THEN window_end := least(window_end, (steps[i]).expires);
      WHEN 2 THEN window_end := least(window_end, (steps[i]).a + wins[i]);
      ELSE return_before := least(return_before, (steps[i]).a);
    END CASE;
  END LOOP;
  return_before := least(return_before, window_end);
END $$;

-- Deletes up to `batch` rows of each table whose expiry has passed,
-- skipping any whose key a call holds; returns how many went. The backend runs it now and
-- then, so that keys no decision touches again do not stay.
CREATE OR REPLACE FUNCTION @schema@.sweep(batch int) RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  gone int;
  lessees_gone int;
BEGIN
  DELETE FROM @schema@.state AS t
    WHERE t.key IN (SELECT s.key FROM @schema@.state AS s
                     WHERE s.expires <= @schema@.clock() LIMIT batch)
      AND t.expires <= @schema@.clock()
      AND pg_try_advisory_xact_lock(hash_array_extended(ARRAY[t.key], 7523805364410236));
  GET DIAGNOSTICS gone = ROW_COUNT;
  DELETE FROM @schema@.lessees AS t
    WHERE (t.key, t.lessee) IN (SELECT s.key, s.lessee FROM @schema@.lessees AS s
                                 WHERE s.expires <= @schema@.clock() LIMIT batch)
      AND t.expires <= @schema@.clock()
      AND pg_try_advisory_xact_lock(hash_array_extended(ARRAY[t.key], 7523805364410236));
  GET DIAGNOSTICS lessees_gone = ROW_COUNT;
  RETURN gone + lessees_gone;
END $$;
