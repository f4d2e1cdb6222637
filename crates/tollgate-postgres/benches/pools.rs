//! The connection pool, chosen by measurement: deadpool-postgres (the
//! backend's) against bb8-postgres on the same server, both over
//! tokio-postgres, each checkout handed back at once and not tested (the
//! backend's setting: deadpool's `RecyclingMethod::Fast`, bb8's
//! `test_on_check_out(false)`; bb8's default sends a query per checkout).
//!
//! `TASKS` tasks each loop: take a connection, make one round trip
//! (`SELECT 1`, a simple query), hand it back. Measured with 64 tasks on
//! pools of 64 and of 8 (tasks waiting for a connection: the pool's queue)
//! and 2 tasks on a pool of 2, `ROUNDS` (3) rounds of `SECONDS` (3) s after
//! a second's warm-up, the pools alternating; prints each run, then the
//! medians: round trips per second, p50 and p99 of a checkout and its
//! round trip, and the bench process's CPU per round trip (the pool's and
//! the client's share; the server's is the same `SELECT 1` for both).
//!
//! ```sh
//! cargo bench -p tollgate-postgres --bench pools
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool as Deadpool, RecyclingMethod};
use tokio_postgres::NoTls;
use tollgate_test_support::bench::{env_number, median};
use tollgate_test_support::postgres_databases::TestDatabase;
use tollgate_test_support::process_cpu::cpu_seconds;

/// A pool under test.
#[derive(Clone)]
enum Pool {
    Deadpool(Deadpool),
    Bb8(bb8::Pool<bb8_postgres::PostgresConnectionManager<NoTls>>),
}

impl Pool {
    fn name(&self) -> &'static str {
        match self {
            Pool::Deadpool(_) => "deadpool-postgres",
            Pool::Bb8(_) => "bb8-postgres",
        }
    }

    async fn new(kind: usize, url: &str, size: usize) -> Pool {
        let config: tokio_postgres::Config = url.parse().expect("the bench database's URL");
        if kind == 0 {
            let manager = Manager::from_config(
                config,
                NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            let pool = Deadpool::builder(manager)
                .max_size(size)
                .build()
                .expect("a deadpool");
            return Pool::Deadpool(pool);
        }
        let manager = bb8_postgres::PostgresConnectionManager::new(config, NoTls);
        let pool = bb8::Pool::builder()
            .max_size(size as u32)
            .test_on_check_out(false)
            .build(manager)
            .await
            .expect("a bb8 pool");
        Pool::Bb8(pool)
    }

    /// One checkout and one round trip on it.
    async fn round_trip(&self) {
        match self {
            Pool::Deadpool(pool) => {
                let client = pool.get().await.expect("a connection");
                client.simple_query("SELECT 1").await.expect("SELECT 1");
            }
            Pool::Bb8(pool) => {
                let client = pool.get().await.expect("a connection");
                client.simple_query("SELECT 1").await.expect("SELECT 1");
            }
        }
    }
}

/// One run's figures.
struct Run {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us: f64,
}

/// `tasks` tasks on `pool` for `seconds` after a second's warm-up.
async fn measure(pool: &Pool, tasks: usize, seconds: u64) -> Run {
    let run = |until: Instant| {
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let mut took = Vec::new();
                    while Instant::now() < until {
                        let start = Instant::now();
                        pool.round_trip().await;
                        took.push(start.elapsed().as_secs_f64() * 1e6);
                    }
                    took
                })
            })
            .collect();
        async move {
            let mut all = Vec::new();
            for handle in handles {
                all.extend(handle.await.expect("a load task"));
            }
            all
        }
    };
    run(Instant::now() + Duration::from_secs(1)).await;
    let cpu = cpu_seconds("self").expect("this process's CPU");
    let start = Instant::now();
    let mut took = run(start + Duration::from_secs(seconds)).await;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds("self").expect("this process's CPU") - cpu;
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
    Run {
        per_second: took.len() as f64 / elapsed,
        p50_us: at(0.5),
        p99_us: at(0.99),
        cpu_us: cpu * 1e6 / took.len() as f64,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let database = Arc::new(TestDatabase::create());
    let rounds = env_number("ROUNDS", 3usize).max(1);
    let seconds = env_number("SECONDS", 3u64).max(1);
    println!("round trips (SELECT 1) through each pool; {rounds} rounds of 1 s warm-up + {seconds} s");
    for (tasks, size) in [(64, 64), (64, 8), (2, 2)] {
        let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for kind in [round % 2, 1 - round % 2] {
                let pool = runtime.block_on(Pool::new(kind, &database.url(), size));
                let run = runtime.block_on(measure(&pool, tasks, seconds));
                println!(
                    "round {} | {tasks} tasks, pool of {size} | {:<17} | {:>8.0}/s | p50 {:>7.0} µs | p99 {:>7.0} µs | bench CPU {:>5.1} µs",
                    round + 1,
                    pool.name(),
                    run.per_second,
                    run.p50_us,
                    run.p99_us,
                    run.cpu_us
                );
                runs[kind].push(run);
                drop(pool);
            }
        }
        report(tasks, size, &runs);
    }
}

/// The medians of each pool, and bb8's over deadpool's.
fn report(tasks: usize, size: usize, runs: &[Vec<Run>; 2]) {
    let m = |kind: usize, figure: fn(&Run) -> f64| median(runs[kind].iter().map(figure));
    println!("\n{tasks} tasks, pool of {size} (medians) | round trips/s | p50 µs | p99 µs | bench CPU µs per round trip");
    for (kind, name) in ["deadpool-postgres", "bb8-postgres"].iter().enumerate() {
        println!(
            "{name:<17} | {:.0} | {:.0} | {:.0} | {:.1}",
            m(kind, |r| r.per_second),
            m(kind, |r| r.p50_us),
            m(kind, |r| r.p99_us),
            m(kind, |r| r.cpu_us)
        );
    }
    println!(
        "bb8 / deadpool: {:.2}x the round trips/s, {:.2}x the p99, {:.2}x the CPU\n",
        m(1, |r| r.per_second) / m(0, |r| r.per_second),
        m(1, |r| r.p99_us) / m(0, |r| r.p99_us),
        m(1, |r| r.cpu_us) / m(0, |r| r.cpu_us)
    );
}
