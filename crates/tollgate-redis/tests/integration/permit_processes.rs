//! Permits across operating-system processes on one Redis: the test
//! re-runs its own binary as worker processes, each with its own
//! connection. Four workers' tasks take permits of three keys and hold them
//! for random times: the intervals between an acquire's answer and its
//! release never hold more than `L` units of a key at once, and every slot
//! comes back. A worker killed with SIGKILL while holding a key's every
//! slot: its units come back within the `ttl` plus a quantum, and not
//! before the permits expire.
//!
//! A worker is the ignored test `permit_worker`, run by the parent with
//! `--ignored --exact` and its settings in environment variables; it
//! connects, says `ready`, waits for `go` on its standard input, then works
//! and prints what it held.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

use tollgate_test_support::workers::{fields, worker_runtime, WorkerTest, Workers};

/// The Redis URL a worker connects to, and what it does (`hold` or `crash`).
const WORKER_URL: &str = "TOLLGATE_PERMIT_WORKER_URL";
const WORKER_MODE: &str = "TOLLGATE_PERMIT_WORKER_MODE";

/// The worker: the ignored test `permit_worker`, whose lines for the
/// parent start with `tollgate-permit-worker:`.
fn worker() -> WorkerTest {
    WorkerTest::new(module_path!(), "permit_worker", "tollgate-permit-worker:")
}

const WORKERS: usize = 4;
const TASKS: usize = 6;
const ROUNDS: usize = 25;
const LIMIT: u64 = 3;
const KEYS: [&str; 3] = ["a", "b", "c"];
/// The crash test's permits last this long.
const CRASH_TTL: Duration = Duration::from_secs(1);

fn limiter(backend: &RedisBackend, ttl: Duration) -> Arc<Limiter<RedisBackend>> {
    let policy = Policy::new(Strategy::Concurrency, LIMIT, ttl).unwrap();
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .policy(policy)
        .resource("permit-processes")
        .build()
        .unwrap();
    Arc::new(limiter)
}

/// Microseconds since the epoch on this machine's clock, which every
/// process shares.
fn micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

#[test]
#[ignore = "a worker process started by the tests of this module"]
fn permit_worker() {
    let (Ok(url), Ok(mode)) = (std::env::var(WORKER_URL), std::env::var(WORKER_MODE)) else {
        return;
    };
    worker_runtime().block_on(async {
        let backend = RedisBackend::builder()
            .timeout(Duration::from_secs(5))
            .connect(&url)
            .await
            .unwrap();
        worker().ready();
        match mode.as_str() {
            "hold" => hold(&backend).await,
            _ => crash(&backend).await,
        }
    });
}

/// Tasks taking permits of the three keys in turn and holding each for a
/// random time; prints each held interval as `key from to` (microseconds).
async fn hold(backend: &RedisBackend) {
    let limiter = limiter(backend, Duration::from_secs(30));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let mut seed = (std::process::id() as u64) << 16 | task as u64 | 1;
            let mut held = Vec::new();
            for round in 0..ROUNDS {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let key = KEYS[(round + task) % KEYS.len()];
                let permit = limiter.acquire_permit(key, 1).await.unwrap();
                if !permit.decision().allowed {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let from = micros();
                tokio::time::sleep(Duration::from_micros(seed % 3_000)).await;
                let to = micros();
                assert!(permit.release().await.unwrap(), "a held permit is released");
                held.push((key, from, to));
            }
            held
        }));
    }
    for task in tasks {
        for (key, from, to) in task.await.unwrap() {
            worker().say(format_args!("{key} {from} {to}"));
        }
    }
    worker().done();
}

/// Takes every slot of the key `crash`, says so, and waits to be killed.
async fn crash(backend: &RedisBackend) {
    let limiter = limiter(backend, CRASH_TTL);
    let mut permits = Vec::new();
    for _ in 0..LIMIT {
        let permit = limiter.acquire_permit("crash", 1).await.unwrap();
        assert!(permit.decision().allowed);
        permits.push(permit);
    }
    worker().say("held");
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(permits);
}

/// Starts `n` workers in `mode` on `server`, each connected and told to go.
fn start(server: &RedisServer, mode: &str, n: usize) -> Workers {
    Workers::start(&worker(), n, &[(WORKER_URL, &server.url()), (WORKER_MODE, mode)])
}

/// The most units `intervals` (each `[from, to)`) hold at one instant.
fn most_at_once(intervals: &[(u64, u64)]) -> u64 {
    let mut edges: Vec<(u64, i64)> = intervals.iter().flat_map(|&(f, t)| [(f, 1), (t, -1)]).collect();
    // At one instant a release comes before an acquire.
    edges.sort_unstable_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i64, 0i64);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as u64
}

#[test]
fn holders_in_four_processes_never_hold_more_than_the_limit() {
    let server = RedisServer::start();
    let workers = start(&server, "hold", WORKERS);
    let mut by_key = std::collections::HashMap::<String, Vec<(u64, u64)>>::new();
    for line in workers.finish().concat() {
        let [key, from, to] = fields(&line);
        by_key
            .entry(key.to_owned())
            .or_default()
            .push((from.parse().unwrap(), to.parse().unwrap()));
    }
    for key in KEYS {
        let intervals = &by_key[key];
        assert!(
            intervals.len() > 20,
            "{key}: only {} permits held",
            intervals.len()
        );
        let most = most_at_once(intervals);
        assert!(
            most <= LIMIT,
            "{key}: {most} holders at once under a limit of {LIMIT}"
        );
        assert_eq!(most, LIMIT, "{key}: the test must fill the limit");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let backend = RedisBackend::connect(&server.url()).await.unwrap();
        let limiter = limiter(&backend, Duration::from_secs(30));
        for key in KEYS {
            let peek = limiter.acquire_permit(key, 0).await.unwrap();
            assert_eq!(peek.decision().remaining, LIMIT, "{key}: every slot came back");
        }
    });
}

#[test]
fn a_killed_holder_s_units_come_back_within_the_ttl() {
    let server = RedisServer::start();
    let mut workers = start(&server, "crash", 1);
    workers.expect(0, "held");
    let held = Instant::now();
    workers.kill(0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let back = runtime.block_on(async {
        let backend = RedisBackend::connect(&server.url()).await.unwrap();
        let limiter = limiter(&backend, CRASH_TTL);
        let first = limiter.acquire_permit("crash", 1).await.unwrap();
        assert!(
            !first.decision().allowed,
            "the killed holder's permits still hold"
        );
        assert!(first.decision().retry_after.is_some_and(|r| r <= CRASH_TTL));
        loop {
            if limiter
                .acquire_permit("crash", 1)
                .await
                .unwrap()
                .decision()
                .allowed
            {
                return held.elapsed();
            }
            assert!(held.elapsed() < CRASH_TTL * 3, "the units never came back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    // Acquired before "held" was read: back at most a ttl after it, plus
    // the polling interval and a scheduling quantum.
    assert!(
        back <= CRASH_TTL + Duration::from_millis(250),
        "back after {back:?}"
    );
}
