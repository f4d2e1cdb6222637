-- tollgate schema version 2: the strategy functions, ports of the core's
-- pure functions (crates/tollgate/src/strategy) at microsecond ticks. Each
-- takes a state (a, b, c; NULL a for none), the limit L, the window W and
-- the emission interval T = max(1, floor(W / L)) in microseconds, a
-- calendar window's periods (NULL for a window of fixed length), now and
-- the cost, and returns a `step`: the outcome and the state it leaves
-- (NULL a: none), which expires at `expires`. They read and write no table.
--
-- Every value stays below 2^63: the backend refuses limits and windows
-- above 2^51 and clock readings from 2^52 microseconds on, and the states
-- saturate there (counts at 2^51, times at 2^52), as the Redis scripts do.
-- Products that could leave that range are computed in numeric.

DO $$ BEGIN
  CREATE TYPE @schema@.step AS (
    allowed boolean, remaining bigint, reset bigint, retry bigint,
    a bigint, b bigint, c bigint, expires bigint);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- A fixed window's bucket at `now`: its start, its count, the time within
-- it (now, or the stored bucket's start when the clock went back before
-- it) and its end. `spans` are a calendar window's boundaries around the
-- caller's now, [b1, b2), [b2, b3) or [b3, b4) holding the period.
CREATE OR REPLACE FUNCTION @schema@.fixed_window_bucket(
  a bigint, b bigint, win bigint, spans bigint[], now bigint,
  OUT start bigint, OUT count bigint, OUT t bigint, OUT fin bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  t := now;
  IF spans IS NULL THEN
    IF a IS NOT NULL AND now < a THEN
      start := a; count := b; t := a;
    ELSIF a IS NOT NULL AND now - a < win THEN
      start := a; count := b;
    ELSE
      start := now - now % win; count := 0;
    END IF;
    fin := start + win;
    RETURN;
  END IF;
  FOR j IN 1..3 LOOP
    IF spans[j] <= now AND now < spans[j + 1] THEN
      start := spans[j]; fin := spans[j + 1];
    END IF;
  END LOOP;
  IF start IS NULL THEN
    RAISE EXCEPTION 'tollgate: the clock reading % is outside the calendar periods sent', now
      USING ERRCODE = 'TG001';
  END IF;
  count := 0;
  IF a IS NOT NULL AND a = start THEN
    count := b;
  ELSIF a IS NOT NULL AND now < a THEN
    -- The clock went back: stay in the stored period, at its start.
    FOR j IN 1..3 LOOP
      IF spans[j] = a THEN
        start := a; count := b; t := a; fin := spans[j + 1];
        RETURN;
      END IF;
    END LOOP;
    RAISE EXCEPTION 'tollgate: the stored period % is outside the calendar periods sent', a
      USING ERRCODE = 'TG001';
  END IF;
END $$;

CREATE OR REPLACE FUNCTION @schema@.fixed_window(
  a bigint, b bigint, c bigint, lim bigint, win bigint, intv bigint, spans bigint[],
  now bigint, cost bigint)
RETURNS @schema@.step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  bucket record;
  n bigint;
  unit bigint := greatest(cost, 1);
  r @schema@.step;
BEGIN
  bucket := @schema@.fixed_window_bucket(a, b, win, spans, now);
  n := bucket.count;
  r.allowed := unit <= lim AND n <= lim - unit;
  IF r.allowed THEN
    n := n + cost;
  END IF;
  r.remaining := greatest(lim - n, 0);
  r.reset := CASE WHEN n > 0 THEN bucket.fin - bucket.t ELSE 0 END;
  r.retry := CASE WHEN NOT r.allowed AND unit <= lim THEN bucket.fin - bucket.t ELSE -1 END;
  IF n > 0 THEN
    r.a := bucket.start; r.b := n;
  END IF;
  r.expires := bucket.fin;
  RETURN r;
END $$;

-- A sliding window's state rolled to `now`: the time it is at (now, or the
-- stored start when the clock went back before it), its start, curr, prev.
CREATE OR REPLACE FUNCTION @schema@.sliding_window_roll(
  a bigint, b bigint, c bigint, win bigint, now bigint,
  OUT t bigint, OUT start bigint, OUT curr bigint, OUT prev bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  t := now; start := now; curr := 0; prev := 0;
  IF a IS NULL THEN
    RETURN;
  END IF;
  t := greatest(now, a);
  IF t - a < win THEN
    start := a; curr := b; prev := c;
  ELSIF t - a < 2 * win THEN
    start := a + win; curr := 0; prev := b;
  END IF;
  IF curr = 0 AND prev = 0 THEN
    start := t;
  END IF;
END $$;

-- How long a denied sliding-window request of `unit` units waits.
CREATE OR REPLACE FUNCTION @schema@.sliding_window_retry(
  lim bigint, win bigint, unit bigint, curr bigint, prev bigint, e bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  headroom numeric := greatest(0, (lim + 1) - (unit + curr));
  q numeric;
  d numeric;
BEGIN
  IF headroom > 0 AND prev > 0 THEN
    q := div(headroom * win - 1, prev);
    d := greatest(1, (win - e) - q);
    IF d < win - e THEN
      RETURN d;
    END IF;
  END IF;
  IF curr = 0 THEN
    RETURN win - e;
  END IF;
  q := div((lim + 1 - unit)::numeric * win - 1, curr);
  RETURN greatest(win - e, (2 * win - e) - q);
END $$;

CREATE OR REPLACE FUNCTION @schema@.sliding_window(
  a bigint, b bigint, c bigint, lim bigint, win bigint, intv bigint, spans bigint[],
  now bigint, cost bigint)
RETURNS @schema@.step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  s record;
  e bigint;
  curr bigint;
  unit bigint := greatest(cost, 1);
  weighted numeric;
  r @schema@.step;
BEGIN
  s := @schema@.sliding_window_roll(a, b, c, win, now);
  e := s.t - s.start;
  curr := s.curr;
  weighted := s.prev::numeric * (win - e);
  r.allowed := unit <= lim AND weighted + curr::numeric * win < (lim - unit + 1)::numeric * win;
  r.retry := -1;
  IF NOT r.allowed AND unit <= lim THEN
    r.retry := @schema@.sliding_window_retry(lim, win, unit, curr, s.prev, e);
  END IF;
  IF r.allowed THEN
    curr := curr + cost;
  END IF;
  r.remaining := greatest(lim - curr - div(weighted, win), 0);
  r.reset := CASE WHEN curr > 0 THEN 2 * win - e WHEN s.prev > 0 THEN win - e ELSE 0 END;
  SELECT x.a, x.b, x.c, x.expires INTO r.a, r.b, r.c, r.expires
    FROM @schema@.sliding_window_state(s.start, curr, s.prev, win) x;
  RETURN r;
END $$;

-- A sliding window's state as stored (NULL a for none) and its expiry.
CREATE OR REPLACE FUNCTION @schema@.sliding_window_state(
  start bigint, curr bigint, prev bigint, win bigint,
  OUT a bigint, OUT b bigint, OUT c bigint, OUT expires bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN curr > 0 OR prev > 0 THEN start END,
         CASE WHEN curr > 0 OR prev > 0 THEN curr END,
         CASE WHEN curr > 0 OR prev > 0 THEN prev END,
         start + CASE WHEN curr > 0 THEN 2 * win ELSE win END
$$;

-- The generic cell rate algorithm of the token bucket and the leaky-bucket
-- meter. State: the theoretical arrival time (tat) at which the bucket is
-- back to full.
CREATE OR REPLACE FUNCTION @schema@.gcra(
  a bigint, b bigint, c bigint, lim bigint, win bigint, intv bigint, spans bigint[],
  now bigint, cost bigint)
RETURNS @schema@.step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  t bigint := CASE WHEN a IS NULL THEN now ELSE greatest(a, now) END;
  burst bigint := lim * intv;
  unit bigint := greatest(cost, 1);
  fits boolean := unit <= lim;
  needed bigint;
  tat bigint;
  r @schema@.step;
BEGIN
  needed := (t - now) + least(unit, lim) * intv;
  r.allowed := fits AND needed <= burst;
  tat := CASE WHEN r.allowed THEN t + cost * intv ELSE t END;
  r.remaining := CASE WHEN burst > tat - now THEN (burst - (tat - now)) / intv ELSE 0 END;
  r.reset := tat - now;
  r.retry := CASE WHEN NOT r.allowed AND fits THEN needed - burst ELSE -1 END;
  IF tat > now THEN
    r.a := tat;
  END IF;
  r.expires := tat;
  RETURN r;
END $$;

-- One strategy step by the strategy's number: 1 fixed window, 2 sliding
-- window, 3 token bucket, 4 leaky bucket.
CREATE OR REPLACE FUNCTION @schema@.step(
  kind smallint, a bigint, b bigint, c bigint, lim bigint, win bigint, intv bigint,
  spans bigint[], now bigint, cost bigint)
RETURNS @schema@.step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  CASE kind
    WHEN 1 THEN RETURN @schema@.fixed_window(a, b, c, lim, win, intv, spans, now, cost);
    WHEN 2 THEN RETURN @schema@.sliding_window(a, b, c, lim, win, intv, spans, now, cost);
    WHEN 3, 4 THEN RETURN @schema@.gcra(a, b, c, lim, win, intv, spans, now, cost);
    ELSE RAISE EXCEPTION 'tollgate: unknown strategy number %', kind USING ERRCODE = 'TG002';
  END CASE;
END $$;

-- A refund (change < 0) or a penalty (change > 0) of a state at `now`, as
-- the core's refund and penalty functions make it, saturating as the
-- header says. Only the state and its expiry of the step are set.
CREATE OR REPLACE FUNCTION @schema@.adjust(
  kind smallint, a bigint, b bigint, c bigint, lim bigint, win bigint, intv bigint,
  spans bigint[], now bigint, change bigint)
RETURNS @schema@.step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  r @schema@.step;
  x record;
  n bigint;
  tat bigint;
BEGIN
  CASE kind
    WHEN 1 THEN
      x := @schema@.fixed_window_bucket(a, b, win, spans, now);
      n := least(greatest(0, x.count + change), 2251799813685248);
      IF n > 0 THEN
        r.a := x.start; r.b := n;
      END IF;
      r.expires := x.fin;
    WHEN 2 THEN
      x := @schema@.sliding_window_roll(a, b, c, win, now);
      n := least(greatest(0, x.curr + change), 4503599627370496 / win);
      SELECT s.a, s.b, s.c, s.expires INTO r.a, r.b, r.c, r.expires
        FROM @schema@.sliding_window_state(x.start, n, x.prev, win) s;
    WHEN 3, 4 THEN
      tat := least(greatest(now, CASE WHEN a IS NULL THEN now ELSE greatest(a, now) END
                                 + change::numeric * intv), 4503599627370496);
      IF tat > now THEN
        r.a := tat;
      END IF;
      r.expires := greatest(tat, now);
    ELSE RAISE EXCEPTION 'tollgate: unknown strategy number %', kind USING ERRCODE = 'TG002';
  END CASE;
  RETURN r;
END $$;
