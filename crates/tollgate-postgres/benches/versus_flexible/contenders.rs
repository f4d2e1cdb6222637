//! The contenders, and one measurement of each on the bench's database,
//! Redis server and Node.js driver.

use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::Backend;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

use crate::database::BenchDatabase;
use crate::flexible::Driver;
use crate::load::load;
use crate::meter::Meter;
use crate::run::Run;
use crate::Settings;

/// Long enough that no decision fails on a loaded machine: a failure
/// would be the fail policy's answer, not the store's.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Who decides.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Contender {
    /// rate-limiter-flexible's `RateLimiterPostgres` on Node.js, its
    /// connections as `pg` opens them (the server's `synchronous_commit`).
    Flexible,
    /// tollgate's PostgreSQL backend as it comes: a logged table, its
    /// connections with `synchronous_commit` off.
    Tollgate,
    /// The same with `unlogged(true)`: the table skips the write-ahead log.
    TollgateUnlogged,
    /// tollgate's Redis backend, one connection per call in flight.
    Redis,
}

impl Contender {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Contender::Flexible => "rate-limiter-flexible (logged, synchronous_commit on)",
            Contender::Tollgate => "tollgate (logged, synchronous_commit off)",
            Contender::TollgateUnlogged => "tollgate unlogged(true)",
            Contender::Redis => "tollgate on Redis",
        }
    }
}

/// What every measurement runs on.
pub(crate) struct Bench {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) database: BenchDatabase,
    pub(crate) redis: RedisServer,
    pub(crate) driver: Driver,
    pub(crate) settings: Settings,
}

impl Bench {
    /// One measurement of `contender` with `connections` calls in flight
    /// over as many connections, once the runs before have closed theirs.
    pub(crate) fn measure(&self, contender: Contender, connections: usize) -> Run {
        self.runtime.block_on(self.database.wait_idle());
        let settings = &self.settings;
        let database = &self.database;
        match contender {
            Contender::Flexible => self
                .driver
                .run(&database.name, &database.url(), connections, settings),
            Contender::Tollgate | Contender::TollgateUnlogged => {
                let unlogged = contender == Contender::TollgateUnlogged;
                self.runtime.block_on(async {
                    let backend = postgres(database, unlogged, connections).await;
                    self.load_on(vec![backend], connections).await
                })
            }
            Contender::Redis => self.runtime.block_on(async {
                let mut backends = Vec::new();
                for _ in 0..connections {
                    let backend = RedisBackend::builder()
                        .timeout(TIMEOUT)
                        .connect(&self.redis.url())
                        .await
                        .expect("connect to the bench's redis-server");
                    backends.push(backend);
                }
                self.load_on(backends, connections).await
            }),
        }
    }

    /// `in_flight` tasks on a fixed-window limiter per backend.
    async fn load_on<B: Backend>(&self, backends: Vec<B>, in_flight: usize) -> Run {
        let limiters: Vec<_> = backends
            .into_iter()
            .map(|backend| {
                let limiter = Limiter::builder()
                    .backend(backend)
                    .policy(policy())
                    .resource("bench")
                    .build()
                    .expect("a fixed-window limiter");
                Arc::new(limiter)
            })
            .collect();
        let meter = Meter::new(&self.database.name, "self");
        load(&limiters, in_flight, &self.settings, &meter).await
    }
}

/// tollgate's PostgreSQL backend on `database` with a pool of
/// `connections`: in schema `tollgate`, or `tollgate_unlogged` for the
/// unlogged table.
async fn postgres(database: &BenchDatabase, unlogged: bool, connections: usize) -> PostgresBackend {
    PostgresBackend::builder(database.url())
        .schema(if unlogged { "tollgate_unlogged" } else { "tollgate" })
        .unlogged(unlogged)
        .pool_size(connections)
        .timeout(TIMEOUT)
        .connect()
        .await
        .expect("connect to the bench database")
}

/// The fixed window both sides decide by: [`crate::LIMIT`] per
/// [`crate::WINDOW`], never reached, so that every decision is admitted
/// and writes.
fn policy() -> Policy {
    Policy::new(Strategy::FixedWindow, crate::LIMIT, crate::WINDOW).expect("a valid policy")
}
