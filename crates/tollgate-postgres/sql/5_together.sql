-- tollgate schema version 5: the parts of one request (an Envoy request's
-- descriptors, each a policy of one or more limits on its own key) decided
-- as one step, as the core's deciding together defines it, in one call.

-- One part of a request: its limits (as decide takes one policy's), the
-- states a, b, c of their keys, the latest end of a block among them, at
-- `tnow`, for `cost`: decide's reply of one request (a blocked key's when
-- the block runs), the steps (NULL when blocked) and whether it admits.
-- `alone`: the part is decided as a request of it alone would be, and
-- reports its state uncharged (a peek's) when it admits.
CREATE OR REPLACE FUNCTION @schema@.together_part(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  a bigint[], b bigint[], c bigint[], ends bigint, tnow bigint, cost bigint, alone boolean,
  OUT reply bigint[], OUT steps @schema@.step[], OUT admits boolean)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  reply := @schema@.blocked_reply(kinds, lims, wins, intvs, spans, a, b, c, ends, tnow);
  admits := false;
  IF reply IS NOT NULL THEN
    RETURN;
  END IF;
  steps := @schema@.decide_all(kinds, lims, wins, intvs, spans, a, b, c, tnow, cost);
  admits := @schema@.all_allowed(steps);
  IF alone AND admits AND cost > 0 THEN
    reply := @schema@.outcomes(@schema@.decide_all(kinds, lims, wins, intvs, spans, a, b, c, tnow, 0));
  ELSE
    reply := @schema@.outcomes(steps);
  END IF;
END $$;

-- The values of `vals` at the indexes slot[lo..hi]: the states (or block
-- ends) of a part's keys, from the arrays kept per distinct key.
CREATE OR REPLACE FUNCTION @schema@.at_slots(vals bigint[], slot int[], lo int, hi int)
RETURNS bigint[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY(SELECT vals[slot[j]] FROM generate_series(lo, hi) AS j)
$$;

-- Decides the parts of one request as one step. Part p asks costs[p]
-- units, denies the request when it denies if decisive[p], and has
-- counts[p] limits: the next counts[p] entries of kinds, lims, wins, intvs
-- and keys, and four spans each, as decide takes one policy's. Two parts
-- may name the same state keys (a policy and key named twice): they share
-- one state.
--
-- The parts are decided in order, each as decide decides a request of its
-- policy (admitted iff every limit admits; a blocked key denies) against
-- the states the earlier parts left: a part that admits charges its
-- limits, one that denies charges nothing. The first decisive part that
-- denies denies the request, and then nothing at all is charged: that part
-- reports its denial, and every other part the decision a request of it
-- alone would get against the stored states, its state uncharged (as a
-- peek sees it) when that decision admits. Every state is saved as its
-- step leaves it, brought forward to now; a key whose block runs is left
-- as it is.
--
-- Returns, for each part in order, decide's reply of one request: four
-- numbers per limit, or a blocked key's (-1, the microseconds left, the
-- latest reset, 0, then zeros).
CREATE OR REPLACE FUNCTION @schema@.together(
  kinds smallint[], lims bigint[], wins bigint[], intvs bigint[], spans bigint[],
  keys bytea[], costs bigint[], decisive boolean[], counts int[], grace bigint, at bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  np int := cardinality(costs);
  nk int := cardinality(keys);
  db_now bigint;
  tnow bigint;
  -- Each distinct key (limit j's is ukeys[slot[j]]), its row as read, its
  -- stored state and block (sa, sb, sc, ends), and its state as the parts
  -- leave it (ca, cb, cc, expiring at cexp; NULL cexp: no step reached it).
  ukeys bytea[] := '{}';
  slot int[];
  olds @schema@.state[];
  sa bigint[]; sb bigint[]; sc bigint[]; ends bigint[];
  ca bigint[]; cb bigint[]; cc bigint[]; cexp bigint[];
  part record;
  denial int;
  lo int := 1;
  hi int;
  u int;
  reply bigint[];
BEGIN
  IF nk = 0 OR cardinality(kinds) <> nk OR cardinality(spans) <> 4 * nk
     OR cardinality(decisive) <> np OR cardinality(counts) <> np
     OR (SELECT sum(n) FROM unnest(counts) AS n) <> nk THEN
    RAISE EXCEPTION 'tollgate: % keys, % limits and % spans for parts of % limits',
      nk, cardinality(kinds), cardinality(spans), counts USING ERRCODE = 'TG004';
  END IF;
  PERFORM @schema@.lock_keys(keys);
  db_now := @schema@.clock();
  tnow := @schema@.decision_time(at, db_now);
  FOR j IN 1..nk LOOP
    slot[j] := array_position(ukeys, keys[j]);
    IF slot[j] IS NULL THEN
      ukeys := ukeys || keys[j];
      u := cardinality(ukeys);
      slot[j] := u;
      olds[u] := @schema@.read_row(keys[j], db_now);
      sa[u] := (olds[u]).a; sb[u] := (olds[u]).b; sc[u] := (olds[u]).c;
      ends[u] := coalesce((olds[u]).blocked, 0);
    END IF;
  END LOOP;
  ca := sa; cb := sb; cc := sc;
  reply := array_fill(0::bigint, ARRAY[4 * nk]);

  -- In order, each part against what the earlier ones left.
  FOR p IN 1..np LOOP
    hi := lo + counts[p] - 1;
    part := @schema@.together_part(kinds[lo:hi], lims[lo:hi], wins[lo:hi], intvs[lo:hi],
      spans[4 * lo - 3 : 4 * hi],
      @schema@.at_slots(ca, slot, lo, hi), @schema@.at_slots(cb, slot, lo, hi),
      @schema@.at_slots(cc, slot, lo, hi),
      (SELECT max(e) FROM unnest(@schema@.at_slots(ends, slot, lo, hi)) AS e), tnow, costs[p], false);
    reply[4 * lo - 3 : 4 * hi] := part.reply;
    FOR j IN lo..hi LOOP
      CONTINUE WHEN part.steps IS NULL;
      u := slot[j];
      ca[u] := (part.steps[j - lo + 1]).a; cb[u] := (part.steps[j - lo + 1]).b;
      cc[u] := (part.steps[j - lo + 1]).c; cexp[u] := (part.steps[j - lo + 1]).expires;
    END LOOP;
    IF NOT part.admits AND decisive[p] THEN
      denial := p;
      EXIT;
    END IF;
    lo := hi + 1;
  END LOOP;

  IF denial IS NOT NULL THEN
    -- Nothing charged: every other part alone against the stored states,
    -- and every key saved as a peek brings it forward.
    lo := 1;
    FOR p IN 1..np LOOP
      hi := lo + counts[p] - 1;
      IF p <> denial THEN
        part := @schema@.together_part(kinds[lo:hi], lims[lo:hi], wins[lo:hi], intvs[lo:hi],
          spans[4 * lo - 3 : 4 * hi],
          @schema@.at_slots(sa, slot, lo, hi), @schema@.at_slots(sb, slot, lo, hi),
          @schema@.at_slots(sc, slot, lo, hi),
          (SELECT max(e) FROM unnest(@schema@.at_slots(ends, slot, lo, hi)) AS e), tnow, costs[p], true);
        reply[4 * lo - 3 : 4 * hi] := part.reply;
      END IF;
      lo := hi + 1;
    END LOOP;
    FOR j IN 1..nk LOOP
      u := slot[j];
      part.steps := ARRAY[@schema@.step(kinds[j], sa[u], sb[u], sc[u], lims[j], wins[j], intvs[j],
        @schema@.span(spans, j), tnow, 0)];
      ca[u] := (part.steps[1]).a; cb[u] := (part.steps[1]).b;
      cc[u] := (part.steps[1]).c; cexp[u] := (part.steps[1]).expires;
    END LOOP;
  END IF;

  FOR u IN 1..cardinality(ukeys) LOOP
    CONTINUE WHEN ends[u] > tnow OR cexp[u] IS NULL;
    PERFORM @schema@.save(ukeys[u], (olds[u]).key IS NOT NULL, olds[u],
      ROW(true, 0, 0, 0, ca[u], cb[u], cc[u], cexp[u])::@schema@.step, NULL, tnow, db_now, grace);
  END LOOP;
  RETURN reply;
END $$;
