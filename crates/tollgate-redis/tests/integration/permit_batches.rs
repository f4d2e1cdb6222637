//! Permits in batched calls: operations on permits that arrive while calls
//! to the server are in flight go out together, each answered exactly as
//! alone. With the caller's clock standing still, many acquires, plain
//! decisions, extends and releases at once on one backend, in whatever
//! order and batches they went out, answer each key as the model of
//! SEMANTICS.md's "Requests in flight" (`tollgate_test_support::
//! in_flight_model`) taken one by one does (the same multiset of answers),
//! as functions and as scripts; and they went out in fewer script calls
//! than operations. An operation that fails in a batch fails alone, as in
//! a call of its own, and the others are answered. Decisions and permits
//! at once share the lanes, each answered by its own kind.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::BackendErrorKind;
use tollgate::clock::ManualClock;
use tollgate::strategy::permits::PermitId;
use tollgate::{Decision, Error, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::in_flight_model::PermitsModel;
use tollgate_test_support::redis::RedisServer;

use crate::support::bound_default;

const LIMIT: u64 = 4;
const TTL_MICROS: u64 = 30_000_000;
const KEYS: usize = 6;
const PER_KEY: usize = 12;

/// What one answer says: allowed, remaining, reset, retry after, and how
/// long the permit lives (microseconds).
type Said = (bool, u64, u64, Option<u64>, Option<u64>);

fn said(d: &Decision, expires_in: Option<Duration>) -> Said {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap();
    (
        d.allowed,
        d.remaining,
        micros(d.reset),
        d.retry_after.map(micros),
        expires_in.map(micros),
    )
}

/// Runs `n` calls `call(i)` at once, each its own task; their answers in
/// the order of `i`, and the script calls the server ran meanwhile.
fn all_at_once<T, F>(
    rt: &tokio::runtime::Runtime,
    server: &RedisServer,
    n: usize,
    call: impl Fn(usize) -> F,
) -> (Vec<T>, u64)
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let before = server.script_calls();
    let got = rt.block_on(async {
        let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(call(i))).collect();
        let mut got = Vec::with_capacity(n);
        for task in tasks {
            got.push(task.await.unwrap());
        }
        got
    });
    (got, server.script_calls() - before)
}

fn key(i: usize) -> String {
    format!("key{}", i % KEYS)
}

/// Asserts that each key's answers in `got` are, as a multiset,
/// `want(key)`'s.
fn same_per_key(what: &str, got: &[(String, Said)], mut want: impl FnMut(usize) -> Vec<Said>) {
    for k in 0..KEYS {
        let name = key(k);
        let mut batched: Vec<Said> = got.iter().filter(|g| g.0 == name).map(|g| g.1).collect();
        let mut alone = want(k);
        batched.sort_unstable();
        alone.sort_unstable();
        assert_eq!(batched, alone, "{what}, {name}");
    }
}

fn permits_agree(server: &RedisServer, url: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::default();
    clock.set_nanos(1_700_000_000_000_000_000);
    let now = 1_700_000_000_000_000;
    let backend = rt
        .block_on(RedisBackend::builder().caller_clock(clock.clone()).connect(url))
        .unwrap();
    let policy = Policy::new(Strategy::Concurrency, LIMIT, Duration::from_micros(TTL_MICROS)).unwrap();
    let limiter = Arc::new(
        Limiter::builder()
            .backend(backend)
            .policy(policy)
            .build()
            .unwrap(),
    );
    rt.block_on(limiter.allow("warm-up")).unwrap();
    let mut model = PermitsModel::new(LIMIT, TTL_MICROS);
    let n = KEYS * PER_KEY;

    // Acquires, more than the limit on each key.
    let (acquired, sent) = all_at_once(&rt, server, n, |i| {
        let limiter = Arc::clone(&limiter);
        async move {
            let permit = limiter.acquire_permit(key(i), 1).await.unwrap();
            let answer = (key(i), said(permit.decision(), permit.expires_in()));
            (answer, permit.detach())
        }
    });
    assert!(sent < n as u64, "{sent} script calls for {n} acquires");
    let answers: Vec<(String, Said)> = acquired.iter().map(|a| a.0.clone()).collect();
    // The model's permits of each key.
    let mut model_ids: Vec<Vec<u64>> = vec![Vec::new(); KEYS];
    same_per_key("acquires", &answers, |k| {
        (0..PER_KEY)
            .map(|_| {
                let a = model.acquire(key(k).as_bytes(), 1, now);
                model_ids[k].extend(a.permit.map(|p| p.id));
                let expires_in = a.permit.map(|p| p.expires - now);
                (a.allowed, a.remaining, a.reset, a.retry_after, expires_in)
            })
            .collect()
    });

    // Plain decisions (a peek each): they hold nothing.
    let (peeks, sent) = all_at_once(&rt, server, n, |i| {
        let limiter = Arc::clone(&limiter);
        async move { (key(i), said(&limiter.allow_n(key(i), 1).await.unwrap(), None)) }
    });
    assert!(sent < n as u64, "{sent} script calls for {n} plain decisions");
    same_per_key("plain decisions", &peeks, |k| {
        (0..PER_KEY)
            .map(|_| {
                let a = model.acquire(key(k).as_bytes(), 0, now);
                (a.allowed, a.remaining, a.reset, a.retry_after, None)
            })
            .collect()
    });

    // Extends, then releases, then releases again, of every permit held.
    let held: Vec<(String, PermitId)> = acquired
        .iter()
        .filter_map(|a| Some((a.0 .0.clone(), a.1?)))
        .collect();
    assert_eq!(held.len(), KEYS * LIMIT as usize);
    let extended = permit_ops(&rt, server, &limiter, &held, Op::Extend);
    same_per_key("extends", &extended, |k| {
        let held = model.held(key(k).as_bytes(), now);
        model_ids[k]
            .iter()
            .map(|id| {
                let at = model.extend(key(k).as_bytes(), *id, now);
                (
                    at.is_some(),
                    LIMIT - held,
                    TTL_MICROS,
                    None,
                    at.map(|at| at - now),
                )
            })
            .collect()
    });
    for round in ["releases", "releases again"] {
        let released = permit_ops(&rt, server, &limiter, &held, Op::Release);
        same_per_key(round, &released, |k| {
            model_ids[k]
                .iter()
                .map(|id| {
                    let (freed, in_flight) = model.release(key(k).as_bytes(), *id, now);
                    let reset = if in_flight > 0 { TTL_MICROS } else { 0 };
                    (freed, LIMIT - in_flight, reset, None, None)
                })
                .collect()
        });
    }
}

#[derive(Clone, Copy)]
enum Op {
    Extend,
    Release,
}

/// Extends or releases every permit of `held` at once, as `op` says: each
/// answer with its key; asserts they went out in fewer script calls.
fn permit_ops(
    rt: &tokio::runtime::Runtime,
    server: &RedisServer,
    limiter: &Arc<Limiter<RedisBackend>>,
    held: &[(String, PermitId)],
    op: Op,
) -> Vec<(String, Said)> {
    let (got, sent) = all_at_once(rt, server, held.len(), |i| {
        let (limiter, (key, id)) = (Arc::clone(limiter), held[i].clone());
        async move {
            let answer = match op {
                Op::Extend => limiter.extend_permit(&key, id).await,
                Op::Release => limiter.release_permit(&key, id).await,
            };
            let answer = answer.unwrap();
            (key, said(&answer.decision, answer.expires_in))
        }
    });
    assert!(
        sent < held.len() as u64,
        "{sent} script calls for {} operations",
        held.len()
    );
    got
}

#[test]
fn batched_permits_answer_as_the_model_and_save_calls() {
    let server = RedisServer::start();
    permits_agree(&server, &server.url());
}

#[test]
fn batched_permit_scripts_answer_as_the_model_and_save_calls() {
    let server = RedisServer::start();
    permits_agree(&server, &server.url_without_functions());
}

/// A key whose permits are under a value of another type: its acquires in
/// a batch fail as alone (a protocol error), the other keys' are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_failing_in_a_batch_fails_alone() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder().connect(&server.url()).await.unwrap();
    let policy = Policy::new(Strategy::Concurrency, 2, Duration::from_secs(30)).unwrap();
    let binding = bound_default(&backend, &policy);
    let state = String::from_utf8(binding.state_keys(b"bad").remove(0)).unwrap();
    server.cli(&["SET", &format!("{{{state}}}:permits"), "not a sorted set"]);
    let limiter = Arc::new(
        Limiter::builder()
            .backend(backend)
            .policy(policy)
            .build()
            .unwrap(),
    );
    let alone = limiter.acquire_permit("bad", 1).await.map(drop).unwrap_err();
    let kind = |err: &Error| match err {
        Error::Backend(err) => err.kind(),
        other => panic!("{other}"),
    };
    assert_eq!(kind(&alone), BackendErrorKind::Protocol, "{alone}");
    let before = server.script_calls();
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let limiter = Arc::clone(&limiter);
            let key = if i % 3 == 0 {
                "bad".to_owned()
            } else {
                format!("good{i}")
            };
            tokio::spawn(async move {
                (
                    key.clone(),
                    limiter.acquire_permit(&key, 1).await.map(|p| p.detach()),
                )
            })
        })
        .collect();
    for task in tasks {
        let (key, got) = task.await.unwrap();
        match got {
            Err(err) => {
                assert_eq!(key, "bad", "{err}");
                assert_eq!(kind(&err), BackendErrorKind::Protocol);
                assert_eq!(err.to_string(), alone.to_string());
            }
            Ok(id) => assert!(key != "bad" && id.is_some(), "{key}"),
        }
    }
    let sent = server.script_calls() - before;
    assert!(sent < 60, "{sent} script calls for 60 acquires");
}

/// Decisions of a rate limit and acquires of a concurrency limit at once
/// on one backend share its lanes: each batch that holds both is two
/// calls, and each answer is its own kind's (the rate admits exactly its
/// limit, the slots hold exactly theirs), in fewer calls than requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_and_permits_share_the_lanes() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder().connect(&server.url()).await.unwrap();
    let limiter = |policy: Policy| {
        Arc::new(
            Limiter::builder()
                .backend(backend.clone())
                .policy(policy)
                .build()
                .unwrap(),
        )
    };
    let rate = limiter(Policy::new(Strategy::FixedWindow, 25, Duration::from_secs(3600)).unwrap());
    let slots = limiter(Policy::new(Strategy::Concurrency, 7, Duration::from_secs(30)).unwrap());
    rate.allow("warm-up").await.unwrap();
    let before = server.script_calls();
    let tasks: Vec<_> = (0..120)
        .map(|i| {
            let (rate, slots) = (Arc::clone(&rate), Arc::clone(&slots));
            tokio::spawn(async move {
                if i % 2 == 0 {
                    (rate.allow("k").await.unwrap().allowed, false)
                } else {
                    let permit = slots.acquire_permit("k", 1).await.unwrap();
                    (false, permit.detach().is_some())
                }
            })
        })
        .collect();
    let (mut admitted, mut held) = (0, 0);
    for task in tasks {
        let (decided, permitted) = task.await.unwrap();
        admitted += u32::from(decided);
        held += u32::from(permitted);
    }
    let sent = server.script_calls() - before;
    assert_eq!((admitted, held), (25, 7));
    assert!(sent < 120, "{sent} script calls for 120 requests");
}
