// The rate-limiter-flexible side of the versus_flexible benchmark:
// `RateLimiterPostgres` (a fixed window) on a `pg` Pool of CONNECTIONS
// connections, with CONNECTIONS `consume(key)` calls in flight, each on a
// random key of KEYS (`key-0` .. `key-{KEYS-1}`), as tollgate's side does.
//
// Settings, from the environment (the benchmark sets them all):
//   PG_URL       the database, a libpq URL
//   CONNECTIONS  the pool's size and the calls in flight
//   WARM_UP_MS   how long to run before measuring
//   SECONDS      how long to measure
//   KEYS         the key space
//   POINTS       the limit per window (high enough that none is denied)
//   DURATION_S   the window
//   TABLE        the table the limiter keeps its rows in
//
// The connections use rate-limiter-flexible's and pg's defaults: nothing
// is set on them, so each upsert commits with the server's
// `synchronous_commit` (on unless the server says otherwise).
//
// Prints one line `{"measuring":true}` when the warm-up ends, then, when
// the measurement ends and the calls in flight are back, one line of JSON:
// decisions, seconds, per_second, denied, errors, p50_us, p90_us, p99_us.
'use strict';

const { Pool } = require('pg');
const { RateLimiterPostgres } = require('rate-limiter-flexible');

function setting(name) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    throw new Error(`${name} is not set`);
  }
  return value;
}

const settings = {
  url: setting('PG_URL'),
  connections: Number(setting('CONNECTIONS')),
  warmUpMs: Number(setting('WARM_UP_MS')),
  seconds: Number(setting('SECONDS')),
  keys: Number(setting('KEYS')),
  points: Number(setting('POINTS')),
  duration: Number(setting('DURATION_S')),
  table: setting('TABLE'),
};

// The limiter, once its table exists (its constructor creates it).
function limiterOn(pool) {
  return new Promise((resolve, reject) => {
    const limiter = new RateLimiterPostgres(
      {
        storeClient: pool,
        tableName: settings.table,
        points: settings.points,
        duration: settings.duration,
      },
      (err) => (err ? reject(err) : resolve(limiter)),
    );
  });
}

// The p-th percentile (0..100) of sorted values, nearest rank.
function percentile(sorted, p) {
  if (sorted.length === 0) {
    return 0;
  }
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(rank, 1)) - 1];
}

// Calls `consume` until `state.stop`, recording what it measures.
async function worker(limiter, state) {
  while (!state.stop) {
    const key = `key-${Math.floor(Math.random() * settings.keys)}`;
    const started = process.hrtime.bigint();
    let outcome = 'admitted';
    try {
      await limiter.consume(key);
    } catch (rejection) {
      // A denial rejects with the limiter's result; anything else is an error.
      outcome = rejection instanceof Error ? 'error' : 'denied';
      if (outcome === 'error' && state.errors === 0) {
        console.error(`consume failed: ${rejection.message}`);
      }
    }
    if (state.measuring) {
      state.latencies.push(Number(process.hrtime.bigint() - started) / 1000);
      state.decisions += 1;
      if (outcome === 'denied') state.denied += 1;
      if (outcome === 'error') state.errors += 1;
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const pool = new Pool({ connectionString: settings.url, max: settings.connections });
  const limiter = await limiterOn(pool);
  const state = { stop: false, measuring: false, decisions: 0, denied: 0, errors: 0, latencies: [] };
  const workers = [];
  for (let i = 0; i < settings.connections; i += 1) {
    workers.push(worker(limiter, state));
  }
  await sleep(settings.warmUpMs);
  process.stdout.write(`${JSON.stringify({ measuring: true })}\n`);
  const started = process.hrtime.bigint();
  state.measuring = true;
  await sleep(settings.seconds * 1000);
  state.measuring = false;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  state.stop = true;
  await Promise.all(workers);
  const sorted = Float64Array.from(state.latencies).sort();
  process.stdout.write(`${JSON.stringify({
    decisions: state.decisions,
    seconds,
    per_second: state.decisions / seconds,
    denied: state.denied,
    errors: state.errors,
    p50_us: percentile(sorted, 50),
    p90_us: percentile(sorted, 90),
    p99_us: percentile(sorted, 99),
  })}\n`);
  await pool.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
