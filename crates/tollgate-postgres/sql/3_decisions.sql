-- tollgate schema version 3: decisions and operations on the state table,
-- each call one transaction.
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

-- Deletes up to `batch` rows whose expiry has passed, skipping any whose
-- key a call holds; returns how many went. The backend runs it now and
-- then, so that keys no decision touches again do not stay.
CREATE OR REPLACE FUNCTION @schema@.sweep(batch int) RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  gone int;
BEGIN
  DELETE FROM @schema@.state AS t
    WHERE t.key IN (SELECT s.key FROM @schema@.state AS s
                     WHERE s.expires <= @schema@.clock() LIMIT batch)
      AND t.expires <= @schema@.clock()
      AND pg_try_advisory_xact_lock(hash_array_extended(ARRAY[t.key], 7523805364410236));
  GET DIAGNOSTICS gone = ROW_COUNT;
  RETURN gone;
END $$;
