//! tollgate's fixed window on PostgreSQL against rate-limiter-flexible's
//! `RateLimiterPostgres`, side by side in one run on the same server (the
//! targets of issue 65; the figures are in docs/performance.md).
//!
//! ```sh
//! cargo bench -p tollgate-postgres --bench versus_flexible
//! ```
//!
//! Needs a PostgreSQL server (`TOLLGATE_POSTGRES_URL`, by default
//! `postgres://postgres@127.0.0.1:5432`, as the tests; a role that may
//! create databases), Node.js with npm (the driver's pinned packages are
//! installed with `npm ci` into the target directory's scratch space the
//! first time), and `redis-server` on the `PATH`.
//!
//! The run makes its own database (`tollgate_bench_<pid>`, dropped at the
//! end) and, in each of `ROUNDS` (3) rounds, measures every contender in
//! turn, the first one changing from round to round:
//!
//! - with `CONNECTIONS` (64) calls in flight over as many connections:
//!   rate-limiter-flexible (Node.js, `pg` Pool, `RateLimiterPostgres`:
//!   one upsert per call, committed with the server's `synchronous_commit`,
//!   on by default, as neither it nor `pg` sets it), tollgate as it comes
//!   (`PostgresBackend::builder(url).pool_size(n)`: a logged table, its
//!   connections with `synchronous_commit` off) and tollgate with
//!   `unlogged(true)`;
//! - with `FEW_CONNECTIONS` (2): the same three and tollgate's Redis
//!   backend on a `redis-server` of the bench's own (one connection per
//!   call in flight).
//!
//! Every call decides a fixed window of 1,000,000 a minute (never reached,
//! so every decision is admitted and writes) on a random key of `KEYS`
//! (10,000): `key-0` … `key-9999` on both sides. Each measurement runs
//! `WARM_UP_MS` (1,000) then counts for `SECONDS` (5): decisions per
//! second, the latency of a decision (p50, p99), and CPU µs per decision
//! of the PostgreSQL server (utime + stime from `/proc/<pid>/stat` of
//! every process whose command is `postgres`, before and after: the
//! postmaster, its background workers and every backend, other databases'
//! too if the machine runs any), of that the bench database's backends
//! alone, and of the load client (this process, or the Node.js driver),
//! which runs on the same cores. It prints the medians, and the medians of
//! each round's ratio against rate-limiter-flexible (and, with few
//! connections, of the p99 against Redis) beside the issue's targets.

mod contenders;
mod database;
mod flexible;
mod load;
mod meter;
mod report;
mod run;

use std::time::Duration;

use contenders::{Bench, Contender};
use database::BenchDatabase;
use flexible::Driver;
use report::Results;
use tollgate_test_support::bench::env_number;
use tollgate_test_support::redis::RedisServer;

/// The limit of the fixed window, per [`WINDOW`]: never reached.
/// rate-limiter-flexible keeps points in an `integer` column.
pub(crate) const LIMIT: u64 = 1_000_000;
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The run's settings, from the environment.
pub(crate) struct Settings {
    pub(crate) rounds: usize,
    pub(crate) seconds: u64,
    pub(crate) warm_up: Duration,
    pub(crate) keys: u64,
    /// The calls in flight (and connections) of the two comparisons.
    pub(crate) connections: [usize; 2],
}

impl Settings {
    fn from_env() -> Self {
        Self {
            rounds: env_number("ROUNDS", 3usize).max(1),
            seconds: env_number("SECONDS", 5u64).max(1),
            warm_up: Duration::from_millis(env_number("WARM_UP_MS", 1_000)),
            keys: env_number("KEYS", 10_000u64).max(1),
            connections: [
                env_number("CONNECTIONS", 64usize).max(1),
                env_number("FEW_CONNECTIONS", 2usize).max(1),
            ],
        }
    }
}

/// The contenders of the comparison with `connections` calls in flight:
/// Redis only in the one with few.
fn contenders(settings: &Settings, connections: usize) -> Vec<Contender> {
    let mut all = vec![
        Contender::Flexible,
        Contender::Tollgate,
        Contender::TollgateUnlogged,
    ];
    if connections == settings.connections[1] {
        all.push(Contender::Redis);
    }
    all
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let database = runtime.block_on(BenchDatabase::create());
    let (version, synchronous_commit) = runtime.block_on(database.server_settings());
    let bench = Bench {
        runtime,
        database,
        redis: RedisServer::start(),
        driver: Driver::install(),
        settings: Settings::from_env(),
    };
    report::header(&bench, &version, &synchronous_commit, &Driver::node_version());
    let mut results = Results::default();
    let settings = &bench.settings;
    for round in 0..settings.rounds {
        for connections in settings.connections {
            let mut order = contenders(settings, connections);
            let first = round % order.len();
            order.rotate_left(first);
            for contender in order {
                let run = bench.measure(contender, connections);
                report::progress(round, connections, contender, &run);
                results.add(connections, contender, run);
            }
        }
    }
    for connections in settings.connections {
        results.print(connections, &contenders(settings, connections));
    }
    let Bench {
        runtime, database, ..
    } = bench;
    runtime.block_on(database.drop_now());
}
