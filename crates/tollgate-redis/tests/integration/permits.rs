//! Permits of requests in flight on Redis: random traces of acquires,
//! releases and extends on a real redis-server with a caller clock, every
//! answer compared with the model of SEMANTICS.md's "Requests in flight"
//! (`tollgate_test_support::in_flight_model`), as functions and as
//! scripts, and with the in-memory backend's on traces whose clock goes
//! back now and then. Then, on the server's own clock: releases, expiry, the keys
//! leaving Redis after their permits, blocks and resets, acquires at once
//! on many connections; one script call per operation sent alone; and permits on
//! every shard of a cluster.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use proptest::test_runner::{Config, TestRunner};
use tollgate::strategy::permits::PermitId;
use tollgate::{Limiter, Operation, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::in_flight_model::PermitsModel;
use tollgate_test_support::redis::cluster::Cluster;
use tollgate_test_support::redis::{cli, RedisServer};

use crate::differential::{Harness, START};
use crate::support::bound_default;

/// One step of a trace.
#[derive(Clone, Debug)]
enum Op {
    Acquire {
        key: u8,
        cost: u64,
    },
    /// Release the `n`-th permit made so far (modulo their number).
    Release {
        n: usize,
    },
    Extend {
        n: usize,
    },
    /// Move the clock on by this many microseconds.
    Advance {
        micros: u64,
    },
}

fn op(limit: u64, ttl: u64) -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0..=limit + 1).prop_map(|(key, cost)| Op::Acquire { key, cost }),
        2 => any::<usize>().prop_map(|n| Op::Release { n }),
        1 => any::<usize>().prop_map(|n| Op::Extend { n }),
        3 => (0..ttl * 2).prop_map(|micros| Op::Advance { micros }),
        // To the microsecond a permit made now expires at.
        1 => Just(Op::Advance { micros: ttl }),
    ]
}

/// `L`, the ttl in microseconds and the steps.
fn trace() -> impl proptest::strategy::Strategy<Value = (u64, u64, Vec<Op>)> {
    (1u64..6, 1u64..5_000).prop_flat_map(|(limit, ttl)| {
        (
            Just(limit),
            Just(ttl),
            proptest::collection::vec(op(limit, ttl), 1..60),
        )
    })
}

fn concurrency(limit: u64, ttl: Duration) -> Policy {
    Policy::new(Strategy::Concurrency, limit, ttl).unwrap()
}

/// Runs `ops` on a limiter of the harness's Redis and on the model, on the
/// harness's clock in whole microseconds, comparing every answer.
fn agree(h: &Harness, limit: u64, ttl: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    h.clock.set_nanos(START);
    let limiter = Arc::new(h.limiter(concurrency(limit, Duration::from_micros(ttl))));
    let mut model = PermitsModel::new(limit, ttl);
    // Every permit made: its key, the model's id and the limiter's.
    let mut made: Vec<(Vec<u8>, u64, PermitId)> = Vec::new();
    let mut now = START / 1_000;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance { micros } => {
                now += micros;
                h.clock.set_nanos(now * 1_000);
            }
            Op::Acquire { key, cost } => {
                let key = vec![b'k', key];
                let want = model.acquire(&key, cost, now);
                let permit = h.rt.block_on(limiter.acquire_permit(&key, cost)).unwrap();
                let got = permit.decision();
                prop_assert_eq!(got.allowed, want.allowed, "step {}: {:?}", step, op);
                prop_assert_eq!(
                    (got.limit, got.remaining),
                    (limit, want.remaining),
                    "step {}: {:?}",
                    step,
                    op
                );
                prop_assert_eq!(
                    got.reset,
                    Duration::from_micros(want.reset),
                    "step {}: {:?}",
                    step,
                    op
                );
                prop_assert_eq!(
                    got.retry_after,
                    want.retry_after.map(Duration::from_micros),
                    "step {}: {:?}",
                    step,
                    op
                );
                prop_assert_eq!(
                    permit.id().is_some(),
                    want.permit.is_some(),
                    "step {}: {:?}",
                    step,
                    op
                );
                if let Some(p) = want.permit {
                    prop_assert_eq!(permit.expires_in(), Some(Duration::from_micros(p.expires - now)));
                }
                if let (Some(id), Some(p)) = (permit.detach(), want.permit) {
                    made.push((key, p.id, id));
                }
            }
            Op::Release { n } if !made.is_empty() => {
                let (key, model_id, id) = &made[n % made.len()];
                let (released, held) = model.release(key, *model_id, now);
                let got = h.rt.block_on(limiter.release_permit(key, *id)).unwrap();
                prop_assert_eq!(
                    (got.decision.allowed, got.in_flight()),
                    (released, held),
                    "step {}: {:?}",
                    step,
                    op
                );
            }
            Op::Extend { n } if !made.is_empty() => {
                let (key, model_id, id) = &made[n % made.len()];
                let want = model.extend(key, *model_id, now);
                let got = h.rt.block_on(limiter.extend_permit(key, *id)).unwrap();
                prop_assert_eq!(got.decision.allowed, want.is_some(), "step {}: {:?}", step, op);
                prop_assert_eq!(
                    got.expires_in,
                    want.map(|at| Duration::from_micros(at - now)),
                    "step {}: {:?}",
                    step,
                    op
                );
            }
            Op::Release { .. } | Op::Extend { .. } => {}
        }
    }
    Ok(())
}

fn agrees_with_the_model(h: &Harness, cases: u32) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&trace(), |(limit, ttl, ops)| agree(h, limit, ttl, &ops))
        .unwrap();
}

#[test]
fn permits_answer_as_the_model() {
    agrees_with_the_model(&Harness::new(), 64);
}

#[test]
fn permits_answer_as_the_model_as_scripts() {
    agrees_with_the_model(&Harness::with_scripts(), 16);
}

/// A permit made on both sides of a differential trace.
struct Twin {
    key: Vec<u8>,
    on_redis: PermitId,
    in_memory: PermitId,
}

/// One step of [`agree_with_memory`]'s traces: `Op`, or the clock moved
/// back by this many microseconds.
fn step_or_back(limit: u64, ttl: u64) -> impl proptest::strategy::Strategy<Value = (Op, u64)> {
    prop_oneof![
        5 => op(limit, ttl).prop_map(|op| (op, 0)),
        1 => (1..ttl * 2).prop_map(|back| (Op::Advance { micros: 0 }, back)),
    ]
}

/// Runs `steps` on a limiter of the harness's Redis and on an in-memory
/// limiter on the same clock, the clock now and then moving back (a key's
/// time never does), comparing every answer.
fn agree_with_memory(h: &Harness, limit: u64, ttl: u64, steps: &[(Op, u64)]) -> Result<(), TestCaseError> {
    h.clock.set_nanos(START);
    let policy = concurrency(limit, Duration::from_micros(ttl));
    let redis = Arc::new(h.limiter(policy));
    let memory = Arc::new(
        Limiter::builder()
            .clock(h.clock.clone())
            .policy(policy)
            .build()
            .unwrap(),
    );
    let mut made: Vec<Twin> = Vec::new();
    let mut now = START / 1_000;
    for (step, (op, back)) in steps.iter().enumerate() {
        let at = format!("step {step}: {op:?}, back {back}");
        match *op {
            Op::Advance { micros } => {
                now = now + micros - back;
                h.clock.set_nanos(now * 1_000);
            }
            Op::Acquire { key, cost } => {
                let key = vec![b'k', key];
                let got = h.rt.block_on(redis.acquire_permit(&key, cost)).unwrap();
                let want = h.rt.block_on(memory.acquire_permit(&key, cost)).unwrap();
                prop_assert_eq!(got.decision(), want.decision(), "{}", at);
                prop_assert_eq!(got.expires_in(), want.expires_in(), "{}", at);
                if let (Some(on_redis), Some(in_memory)) = (got.detach(), want.detach()) {
                    made.push(Twin {
                        key,
                        on_redis,
                        in_memory,
                    });
                }
            }
            Op::Release { n } | Op::Extend { n } if !made.is_empty() => {
                let twin = &made[n % made.len()];
                let (got, want) = if let Op::Release { .. } = op {
                    (
                        h.rt.block_on(redis.release_permit(&twin.key, twin.on_redis)),
                        h.rt.block_on(memory.release_permit(&twin.key, twin.in_memory)),
                    )
                } else {
                    (
                        h.rt.block_on(redis.extend_permit(&twin.key, twin.on_redis)),
                        h.rt.block_on(memory.extend_permit(&twin.key, twin.in_memory)),
                    )
                };
                prop_assert_eq!(got.unwrap(), want.unwrap(), "{}", at);
            }
            Op::Release { .. } | Op::Extend { .. } => {}
        }
    }
    Ok(())
}

#[test]
fn permits_answer_as_in_memory_when_the_clock_goes_back() {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    let traces = (1u64..6, 1u64..5_000).prop_flat_map(|(limit, ttl)| {
        (
            Just(limit),
            Just(ttl),
            proptest::collection::vec(step_or_back(limit, ttl), 1..60),
        )
    });
    runner
        .run(&traces, |(limit, ttl, steps)| {
            agree_with_memory(&h, limit, ttl, &steps)
        })
        .unwrap();
}

/// A limiter of `policy` on `server`, on the server's clock, with no
/// expiry grace (its keys leave Redis with their last permit), and the
/// Redis keys of `key`'s permits: the sorted set and the hash beside its
/// state key.
async fn on_server_clock(
    server: &RedisServer,
    policy: Policy,
    key: &str,
) -> (Arc<Limiter<RedisBackend>>, [String; 2]) {
    let backend = RedisBackend::builder()
        .expiry_grace(Duration::ZERO)
        .connect(&server.url())
        .await
        .unwrap();
    let binding = bound_default(&backend, &policy);
    let state = String::from_utf8(binding.state_keys(key.as_bytes()).remove(0)).unwrap();
    let keys = [
        format!("{{{state}}}:permits"),
        format!("{{{state}}}:permit_units"),
    ];
    let limiter = Limiter::builder()
        .backend(backend)
        .policy(policy)
        .build()
        .unwrap();
    (Arc::new(limiter), keys)
}

#[tokio::test]
async fn on_the_servers_clock_permits_are_released_expire_and_leave_redis() {
    let server = RedisServer::start();
    let (limiter, keys) = on_server_clock(&server, concurrency(2, Duration::from_millis(200)), "k").await;
    let first = limiter.acquire_permit("k", 1).await.unwrap();
    let second = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(first.decision().allowed && second.decision().allowed);
    let full = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(!full.decision().allowed);
    assert_eq!(full.id(), None, "a denial holds nothing");
    let wait = full.decision().retry_after.unwrap();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_millis(200),
        "{wait:?}"
    );

    let id = first.id().unwrap();
    assert!(first.release().await.unwrap(), "released");
    let again = limiter.release_permit("k", id).await.unwrap();
    assert!(!again.decision.allowed, "a second release frees nothing");
    assert_eq!(again.in_flight(), 1);
    for key in &keys {
        let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
        assert!(
            ttl > 0 && ttl <= 200,
            "{key} expires with its last permit: {ttl} ms"
        );
    }

    // The second permit, never released, expires with its ttl.
    let taken = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(taken.decision().allowed, "the released slot is free");
    let _ = taken.detach();
    let _ = second.detach();
    assert!(!limiter.acquire_permit("k", 1).await.unwrap().decision().allowed);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let back = limiter.acquire_permit("k", 2).await.unwrap();
    assert!(back.decision().allowed, "both expired permits came back");
    assert_eq!(back.decision().remaining, 0);
    let _ = back.detach();
    tokio::time::sleep(Duration::from_millis(250)).await;
    for key in &keys {
        assert_eq!(
            server.cli(&["EXISTS", key]),
            "0",
            "{key} left Redis after its permits"
        );
    }
}

#[tokio::test]
async fn a_block_denies_acquires_a_reset_frees_permits_and_decisions_hold_nothing() {
    let server = RedisServer::start();
    let (limiter, keys) = on_server_clock(&server, concurrency(2, Duration::from_secs(30)), "k").await;
    let held = limiter.acquire_permit("k", 2).await.unwrap();
    let id = held.detach().unwrap();
    // A plain decision is a peek: it holds nothing, whatever it answers.
    assert!(!limiter.allow("k").await.unwrap().allowed);
    assert!(!limiter.acquire_permit("k", 0).await.unwrap().decision().allowed);

    limiter.operate("k", Operation::Reset).await.unwrap();
    for key in &keys {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "a reset deletes {key}");
    }
    assert!(!limiter.release_permit("k", id).await.unwrap().decision.allowed);
    let d = limiter.allow("k").await.unwrap();
    assert!(d.allowed && d.remaining == 2, "{d:?}");

    let kept = limiter.acquire_permit("k", 1).await.unwrap();
    limiter
        .operate("k", Operation::Block(Duration::from_secs(60)))
        .await
        .unwrap();
    let blocked = limiter.acquire_permit("k", 1).await.unwrap();
    let d = blocked.decision();
    assert!(!d.allowed && d.remaining == 0 && blocked.id().is_none(), "{d:?}");
    assert!(d.retry_after.unwrap() > Duration::from_secs(59), "{d:?}");
    // Refunds and penalties change nothing; releases and extends apply.
    limiter.operate("k", Operation::Refund(1)).await.unwrap();
    limiter.operate("k", Operation::Penalty(5)).await.unwrap();
    let id = kept.detach().unwrap();
    assert!(limiter.extend_permit("k", id).await.unwrap().decision.allowed);
    let released = limiter.release_permit("k", id).await.unwrap();
    assert!(released.decision.allowed && released.in_flight() == 0);
    limiter
        .operate("k", Operation::Block(Duration::ZERO))
        .await
        .unwrap();
    assert!(limiter.acquire_permit("k", 2).await.unwrap().decision().allowed);
}

#[tokio::test]
async fn each_acquire_and_each_release_is_one_script_call() {
    let server = RedisServer::start();
    let (limiter, _) = on_server_clock(&server, concurrency(3, Duration::from_secs(30)), "k").await;
    // Load the function library first, so that no retry after a missing
    // function is counted below.
    limiter.allow("warm-up").await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let mut ids = Vec::new();
    for _ in 0..5 {
        let permit = limiter.acquire_permit("k", 1).await.unwrap();
        ids.extend(permit.detach());
    }
    assert_eq!(ids.len(), 3);
    assert_eq!(server.script_calls(), 5, "five acquires");
    for id in &ids {
        assert!(limiter.release_permit("k", *id).await.unwrap().decision.allowed);
    }
    assert!(limiter.extend_permit("k", ids[0]).await.is_ok());
    assert_eq!(server.script_calls(), 5 + 3 + 1, "three releases and an extend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_kept_on_every_shard_of_a_cluster() {
    let cluster = Cluster::start(3, 0, 2_000);
    let backend = RedisBackend::builder()
        .timeout(Duration::from_secs(5))
        .connect_cluster(&cluster.urls())
        .await
        .unwrap();
    let policy = concurrency(2, Duration::from_secs(30));
    let binding = bound_default(&backend, &policy);
    let limiter = Arc::new(
        Limiter::builder()
            .backend(backend)
            .policy(policy)
            .build()
            .unwrap(),
    );
    // One key owned by each primary, and keys holding braces, whose
    // permits need a tag of their own in the state key's slot.
    let mut keys = Vec::new();
    for primary in cluster.primaries() {
        let key = (0..)
            .map(|i| format!("user-{i}"))
            .find(|k| {
                let state = String::from_utf8(binding.state_keys(k.as_bytes()).remove(0)).unwrap();
                cluster.owner(cluster.slot(&state)) == primary
            })
            .unwrap();
        keys.push(key);
    }
    keys.extend(["a}b".to_owned(), "{x}y".to_owned(), "}{".to_owned()]);
    for key in &keys {
        let first = limiter.acquire_permit(key, 2).await.unwrap();
        assert!(first.decision().allowed, "{key}");
        assert!(
            !limiter.acquire_permit(key, 1).await.unwrap().decision().allowed,
            "{key}"
        );
        assert!(first.release().await.unwrap(), "{key}");
        let again = limiter.acquire_permit(key, 2).await.unwrap();
        assert!(again.decision().allowed, "{key}: the released units are free");
        assert!(again.release().await.unwrap(), "{key}");
        limiter.operate(key, Operation::Reset).await.unwrap();
    }
    // Each primary holds no permit keys once they are released.
    for primary in cluster.primaries() {
        assert_eq!(cli(primary, &["DBSIZE"]), "0", "primary {primary}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_on_many_connections_hold_at_most_the_limit() {
    let server = RedisServer::start();
    let policy = concurrency(3, Duration::from_secs(30));
    let mut limiters = Vec::new();
    for _ in 0..4 {
        let (limiter, _) = on_server_clock(&server, policy, "k").await;
        limiters.push(limiter);
    }
    let mut tasks = Vec::new();
    for limiter in &limiters {
        for _ in 0..10 {
            let limiter = Arc::clone(limiter);
            tasks.push(tokio::spawn(async move {
                let permit = limiter.acquire_permit("k", 1).await.unwrap();
                permit.detach()
            }));
        }
    }
    let mut held = Vec::new();
    for task in tasks {
        held.extend(task.await.unwrap());
    }
    assert_eq!(held.len(), 3, "40 acquires at once, a limit of 3");
    for (i, id) in held.iter().enumerate() {
        let released = limiters[i % 4].release_permit("k", *id).await.unwrap();
        assert!(released.decision.allowed);
        assert_eq!(released.in_flight(), 2 - i as u64);
    }
}
