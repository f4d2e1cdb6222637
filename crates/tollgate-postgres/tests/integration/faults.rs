//! Faults of a real server: PostgreSQL restarted under load
//! (`pg_ctl restart -m fast`, on a private server) and the backend's
//! connections killed (`pg_terminate_backend`). While the server is gone
//! the fail policy decides; within a second of its return decisions
//! succeed again (the pool drops the broken connections and opens new
//! ones); and no decision is lost silently: the store's count lies between
//! what the callers saw admitted and that plus the calls that got no
//! answer (which may have been charged).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::backend::BackendErrorKind;
use tollgate::{Error, FailPolicy, Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;
use tollgate_test_support::postgres::PostgresServer;

use crate::support::TestDatabase;

/// The backend's timeout (and connect timeout) in these tests.
const TIMEOUT: Duration = Duration::from_millis(500);
/// A limit no test reaches, over a window nothing outlives: every decision
/// the store makes admits, and its count is the units it charged.
const LIMIT: u64 = 1_000_000;
const YEARS_50: Duration = Duration::from_secs(50 * 365 * 86_400);

/// How one call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Decided by the store, admitted.
    Admitted,
    /// Admitted by the fail-open policy: the call got no answer.
    FailOpen,
    /// Failed (fail closed): the call got no answer.
    Failed,
}

/// The calls of one limiter: when each ended, and how.
type Calls = Arc<Mutex<Vec<(Instant, Outcome)>>>;

fn limiter(backend: &PostgresBackend, name: &str, fail: FailPolicy) -> Limiter<PostgresBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .policy(Policy::new(Strategy::FixedWindow, LIMIT, YEARS_50).unwrap())
        .resource(name)
        .fail_policy(fail)
        .build()
        .unwrap()
}

async fn backend(url: &str) -> PostgresBackend {
    PostgresBackend::builder(url)
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .pool_size(4)
        // Each decision a call of its own, so that four at once take the
        // pool's four connections (batched, they would share two).
        .batch_calls(false)
        .sweep_interval(None)
        .connect()
        .await
        .unwrap()
}

/// One decision of `limiter` on `key`, recorded in `calls`; an error must
/// say that the server is out of reach.
async fn decide(limiter: &Limiter<PostgresBackend>, key: &str, calls: &Calls) {
    let outcome = match limiter.allow(key).await {
        Ok(d) if d.fail_open => {
            assert!(d.allowed);
            Outcome::FailOpen
        }
        Ok(d) => {
            assert!(d.allowed, "{d:?}: the limit is never reached");
            Outcome::Admitted
        }
        Err(Error::Backend(err)) => {
            assert!(
                matches!(
                    err.kind(),
                    BackendErrorKind::Unavailable | BackendErrorKind::Timeout
                ),
                "{err}"
            );
            Outcome::Failed
        }
        Err(other) => panic!("unexpected error {other}"),
    };
    calls.lock().unwrap().push((Instant::now(), outcome));
}

/// The units the store holds for `key` of `limiter`'s resource, read by a
/// peek on a backend of its own.
async fn held(url: &str, name: &str, key: &str) -> u64 {
    let direct = limiter(&backend(url).await, name, FailPolicy::Closed);
    let peek = direct.allow_n(key, 0).await.unwrap();
    peek.limit - peek.remaining
}

/// Checks the store's count for `name`'s key against `calls`: at least
/// the admitted ones, at most those and the unanswered ones; returns
/// (admitted, unanswered).
async fn check_count(url: &str, name: &str, calls: &Calls) -> (u64, u64) {
    let calls = calls.lock().unwrap().clone();
    let admitted = calls.iter().filter(|(_, o)| *o == Outcome::Admitted).count() as u64;
    let unanswered = calls.len() as u64 - admitted;
    let held = held(url, name, "k").await;
    assert!(
        admitted <= held && held <= admitted + unanswered,
        "{name}: the store holds {held}, {admitted} admitted and {unanswered} unanswered"
    );
    (admitted, unanswered)
}

/// Runs `tasks` tasks per limiter deciding on key `k` until `stop`
/// resolves; panics if a task did.
async fn load(
    limiters: &[(Arc<Limiter<PostgresBackend>>, Calls)],
    tasks: usize,
    stop: impl std::future::Future<Output = ()>,
) {
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut handles = Vec::new();
    for (limiter, calls) in limiters {
        for _ in 0..tasks {
            let (limiter, calls, running) = (limiter.clone(), calls.clone(), running.clone());
            handles.push(tokio::spawn(async move {
                while running.load(std::sync::atomic::Ordering::Relaxed) {
                    decide(&limiter, "k", &calls).await;
                    // Failures come fast while the port is closed: pace
                    // them, so that the server's restart gets the CPU.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
    }
    stop.await;
    running.store(false, std::sync::atomic::Ordering::Relaxed);
    for handle in handles {
        handle.await.expect("a deciding task panicked");
    }
}

/// Waits until `calls` holds `n` admitted calls.
async fn until_admitted(calls: &Calls, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, o)| *o == Outcome::Admitted)
        .count()
        < n
    {
        assert!(Instant::now() < deadline, "no decisions before the fault");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the calls of one limiter show of an outage that began at
/// `began` and ended at `back`: how many calls went unanswered, how long
/// from the first unanswered call to the last, and how long after `back`
/// the last unanswered one and the first admitted one ended.
#[derive(Debug)]
struct Outage {
    unanswered: usize,
    failing_for: Duration,
    last_failure_after_back: Duration,
    first_admitted_after_back: Duration,
    admitted_later: usize,
}

fn outage(calls: &Calls, began: Instant, back: Instant) -> Outage {
    let calls = calls.lock().unwrap();
    let failed: Vec<Instant> = calls
        .iter()
        .filter(|(_, o)| *o != Outcome::Admitted)
        .map(|(at, _)| *at)
        .collect();
    let (Some(first), Some(last)) = (failed.first(), failed.last()) else {
        panic!("no call failed during the restart");
    };
    assert!(*first >= began, "a call failed before the restart");
    let admitted_after = |at: Instant| {
        calls
            .iter()
            .filter(move |(end, o)| *o == Outcome::Admitted && *end >= at)
    };
    let first_admitted = admitted_after(back)
        .next()
        .expect("no decision after the server came back")
        .0;
    Outage {
        unanswered: failed.len(),
        failing_for: last.duration_since(*first),
        last_failure_after_back: last.saturating_duration_since(back),
        first_admitted_after_back: first_admitted.saturating_duration_since(back),
        admitted_later: admitted_after(back + Duration::from_secs(1)).count(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_fails_decisions_by_the_policy_then_they_succeed_within_a_second() {
    let mut server = PostgresServer::start();
    let url = server.url();
    let backend = backend(&url).await;
    let limiters: Vec<(Arc<Limiter<PostgresBackend>>, Calls)> =
        [("closed", FailPolicy::Closed), ("open", FailPolicy::Open)]
            .into_iter()
            .map(|(name, fail)| (Arc::new(limiter(&backend, name, fail)), Calls::default()))
            .collect();
    let times = Arc::new(Mutex::new(None));
    let restart = {
        let (closed_calls, times) = (limiters[0].1.clone(), times.clone());
        async move {
            until_admitted(&closed_calls, 50).await;
            let began = Instant::now();
            let server = tokio::task::spawn_blocking(move || {
                server.restart();
                server
            })
            .await
            .unwrap();
            let back = Instant::now();
            *times.lock().unwrap() = Some((began, back, server));
            // Decisions go on for two seconds after the return.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    };
    load(&limiters, 3, restart).await;
    let (began, back, _server) = times.lock().unwrap().take().unwrap();
    for ((limiter, calls), name) in limiters.iter().zip(["closed", "open"]) {
        let seen = outage(calls, began, back);
        eprintln!(
            "{name}: restart took {:?}; {} calls unanswered over {:?}, the last {:?} after \
             the return; the first admitted {:?} after it",
            back - began,
            seen.unanswered,
            seen.failing_for,
            seen.last_failure_after_back,
            seen.first_admitted_after_back
        );
        assert!(
            seen.last_failure_after_back < Duration::from_secs(1),
            "{name}: {seen:?}"
        );
        assert!(
            seen.first_admitted_after_back < Duration::from_secs(1),
            "{name}: {seen:?}"
        );
        assert!(seen.admitted_later > 0, "{name}: {seen:?}");
        let (_, unanswered) = check_count(&url, name, calls).await;
        if name == "open" {
            assert_eq!(
                limiter.fail_open_events(),
                unanswered,
                "every unanswered call admitted as fail-open"
            );
        }
    }
}

/// The backend's connections to `db` now.
async fn connections(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = 'tollgate' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Ends every connection of the backend to `db`; how many it ended.
async fn kill_connections(admin: &tokio_postgres::Client) -> u64 {
    let killed: i64 = admin
        .query_one(
            // Materialized: the filter runs before any termination (the
            // planner may otherwise call it on this very connection).
            "WITH victims AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
               WHERE application_name = 'tollgate' AND datname = current_database()) \
             SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM victims",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    killed as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_fail_a_decision_each_at_most_then_decisions_succeed() {
    let db = TestDatabase::create().await;
    let (url, admin) = (db.url(), db.client().await);
    let backend = backend(&url).await;
    let closed = Arc::new(limiter(&backend, "closed", FailPolicy::Closed));
    let calls = Calls::default();
    // Idle connections killed: each fails at most the one decision that
    // takes it before the client sees it closed.
    for round in 0..3 {
        while connections(&admin).await < 4 {
            let d = || decide(&closed, "k", &calls);
            tokio::join!(d(), d(), d(), d());
        }
        let killed = kill_connections(&admin).await;
        assert_eq!(killed, 4, "the pool's four connections");
        let before = calls.lock().unwrap().len();
        for _ in 0..20 {
            decide(&closed, "k", &calls).await;
        }
        let outcomes: Vec<Outcome> = calls.lock().unwrap()[before..].iter().map(|c| c.1).collect();
        let failed = outcomes.iter().filter(|o| **o == Outcome::Failed).count();
        eprintln!("round {round}: {killed} idle connections killed, {failed} decisions failed");
        assert!(failed as u64 <= killed, "{outcomes:?}");
        assert!(
            outcomes[killed as usize..]
                .iter()
                .all(|o| *o == Outcome::Admitted),
            "{outcomes:?}"
        );
    }
    // Killed under load, five times: never more failures than killed
    // connections, and none a second after the last kill.
    let loaded = Calls::default();
    let killed = Arc::new(Mutex::new((0, None)));
    let kills = {
        let (loaded, killed) = (loaded.clone(), killed.clone());
        async move {
            for _ in 0..5 {
                until_admitted(&loaded, 20).await;
                let n = kill_connections(&admin).await;
                {
                    let mut killed = killed.lock().unwrap();
                    *killed = (killed.0 + n, Some(Instant::now()));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    load(&[(closed, loaded.clone())], 4, kills).await;
    let (killed, last_kill) = *killed.lock().unwrap();
    let last_kill = last_kill.unwrap();
    let loaded = std::mem::take(&mut *loaded.lock().unwrap());
    let failures: Vec<Instant> = loaded
        .iter()
        .filter(|(_, o)| *o == Outcome::Failed)
        .map(|(at, _)| *at)
        .collect();
    eprintln!(
        "under load: {killed} connections killed, {} of {} decisions failed",
        failures.len(),
        loaded.len()
    );
    assert!(failures.len() as u64 <= killed);
    assert!(failures
        .iter()
        .all(|at| at.saturating_duration_since(last_kill) < Duration::from_secs(1)));
    calls.lock().unwrap().extend(loaded);
    let (admitted, unanswered) = check_count(&url, "closed", &calls).await;
    eprintln!("{admitted} admitted, {unanswered} unanswered");
}
