//! Redis Cluster under change: a slot in use moves to another primary while
//! decisions run (MIGRATING/IMPORTING, ASK and MOVED redirections), and a
//! primary is killed so that its replica takes over. The same limiters keep
//! deciding through both, and state that reached the new owner is kept.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Limiter, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::cli;
use tollgate_test_support::redis::cluster::Cluster;

const LIMIT: u64 = 100_000;

/// Windows over which nothing measurable refills during the test, so that
/// `remaining` is exactly `LIMIT` minus the units admitted. The sliding
/// window's `limit × window` must stay within 2^52 µs.
fn window(strategy: Strategy) -> Duration {
    match strategy {
        Strategy::SlidingWindow => Duration::from_secs(12 * 3600),
        _ => Duration::from_secs(50 * 365 * 24 * 3600),
    }
}

fn limiters(backend: &RedisBackend) -> Vec<Arc<Limiter<RedisBackend>>> {
    Strategy::ALL
        .iter()
        .map(|&strategy| {
            Arc::new(
                Limiter::builder()
                    .backend(backend.clone())
                    .strategy(strategy)
                    .limit(LIMIT)
                    .window(window(strategy))
                    .build()
                    .unwrap(),
            )
        })
        .collect()
}

/// Waits (polling a counter bumped by the live decisions) until at least
/// `more` further decisions were made.
fn wait_for_decisions(counter: &AtomicU64, more: u64) {
    let target = counter.load(Ordering::SeqCst) + more;
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter.load(Ordering::SeqCst) < target {
        assert!(Instant::now() < deadline, "the live decisions stalled");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Moves `slot` from the primary on `source` to the one on `target` the way
/// `redis-cli --cluster reshard` does, letting live decisions run between
/// the steps: IMPORTING on the target, MIGRATING on the source, MIGRATE of
/// every key, then the new owner announced to every primary.
fn move_slot(slot: u16, source: u16, target: u16, primaries: &[u16], decisions: &AtomicU64) {
    let ok = |port: u16, args: &[&str]| {
        let reply = cli(port, args);
        assert_eq!(reply, "OK", "{args:?} on port {port}");
    };
    let (slot, source_id, target_id) = (
        slot.to_string(),
        cli(source, &["CLUSTER", "MYID"]),
        cli(target, &["CLUSTER", "MYID"]),
    );
    ok(target, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
    ok(source, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
    wait_for_decisions(decisions, 50);
    let target_port = target.to_string();
    loop {
        let keys = cli(source, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
        if keys.is_empty() {
            break;
        }
        let mut args = vec!["MIGRATE", "127.0.0.1", &target_port, "", "0", "5000", "KEYS"];
        args.extend(keys.lines());
        ok(source, &args);
        // Decisions now meet ASK redirections for the keys moved.
        wait_for_decisions(decisions, 50);
    }
    ok(target, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    ok(source, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    for &port in primaries {
        if port != source && port != target {
            ok(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        }
    }
    // Decisions now meet MOVED and refresh the client's slot map. With the
    // waits above, at least 500 decisions run during the move, so each of
    // the four limiters (decided in turn) makes at least 124 of them.
    wait_for_decisions(decisions, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_a_slot_resharded_while_in_use_and_keep_their_state() {
    let cluster = Cluster::start(3, 0, 2_000);
    let backend = RedisBackend::builder()
        .timeout(Duration::from_secs(2))
        .connect_cluster(&cluster.urls())
        .await
        .unwrap();
    let limiters = limiters(&backend);
    // One hash tag: the four strategies' state keys share one slot.
    let key = "{moving}:alice";
    let state_keys: Vec<String> = Strategy::ALL
        .iter()
        .map(|s| format!("tollgate::{}:{key}", s.name()))
        .collect();
    let slot = cluster.slot(&state_keys[0]);
    assert!(state_keys.iter().all(|k| cluster.slot(k) == slot));
    let primaries = cluster.primaries();
    let source = cluster.owner(slot);
    let target = *primaries.iter().find(|&&p| p != source).unwrap();

    let mut admitted = [0u64; 4];
    for (i, limiter) in limiters.iter().enumerate() {
        for _ in 0..5 {
            assert!(limiter.allow(key).await.unwrap().allowed);
            admitted[i] += 1;
        }
    }
    for k in &state_keys {
        assert_eq!(cli(source, &["EXISTS", k]), "1");
    }

    // Decisions run without pause while the slot moves.
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let live = {
        let (limiters, stop, decisions) = (limiters.clone(), stop.clone(), decisions.clone());
        tokio::spawn(async move {
            let mut admitted = [0u64; 4];
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                for (i, limiter) in limiters.iter().enumerate() {
                    match limiter.allow(key).await {
                        Ok(d) => admitted[i] += u64::from(d.allowed),
                        Err(err) => errors.push(err.to_string()),
                    }
                    decisions.fetch_add(1, Ordering::SeqCst);
                }
            }
            (admitted, errors)
        })
    };
    let moving = {
        let (primaries, decisions) = (primaries.clone(), decisions.clone());
        tokio::task::spawn_blocking(move || move_slot(slot, source, target, &primaries, &decisions))
    };
    moving.await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let (live_admitted, errors) = live.await.unwrap();
    assert!(
        errors.is_empty(),
        "{} decisions failed during the move: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );

    // The state moved with the slot, and nothing was lost or duplicated:
    // every strategy has exactly LIMIT minus what was admitted left.
    assert_eq!(cluster.owner(slot), target);
    assert_eq!(
        cli(source, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]),
        "0"
    );
    for k in &state_keys {
        assert_eq!(cli(target, &["EXISTS", k]), "1", "{k} on the new owner");
    }
    for (i, limiter) in limiters.iter().enumerate() {
        admitted[i] += live_admitted[i];
        // Guaranteed by the waits in `move_slot`, however loaded the machine.
        assert!(
            live_admitted[i] >= 100,
            "too few decisions during the move: {live_admitted:?}"
        );
        let peek = limiter.allow_n(key, 0).await.unwrap();
        assert_eq!(peek.remaining, LIMIT - admitted[i], "{}", Strategy::ALL[i]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_resume_after_a_primary_fails_over_to_its_replica() {
    // One replica per primary; a node unreachable for 1 s is failed.
    let mut cluster = Cluster::start(3, 1, 1_000);
    let backend = RedisBackend::builder()
        .timeout(Duration::from_millis(200))
        .connect_cluster(&cluster.urls())
        .await
        .unwrap();
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::TokenBucket)
        .limit(LIMIT)
        .window(window(Strategy::TokenBucket))
        .build()
        .unwrap();
    let key = "{failing}:bob";
    let state_key = format!("tollgate::token_bucket:{key}");
    let primary = cluster.owner(cluster.slot(&state_key));
    // A key served by another primary, which stays up.
    let steady = (0..)
        .map(|i| format!("steady-{i}"))
        .find(|k| cluster.owner(cluster.slot(&format!("tollgate::token_bucket:{k}"))) != primary)
        .unwrap();
    let replicas = cluster.replicas_of(primary);
    assert_eq!(replicas.len(), 1, "one replica of {primary}");
    let replica = replicas[0];

    let mut admitted = 0;
    for _ in 0..10 {
        assert!(limiter.allow(key).await.unwrap().allowed);
        assert!(limiter.allow(&steady).await.unwrap().allowed);
        admitted += 1;
    }
    // Replication is asynchronous: wait until the replica has the state, so
    // this test checks that replicated state survives (unreplicated writes
    // may be lost in a failover; see docs/redis.md).
    let offset = |port: u16| -> u64 {
        cli(port, &["INFO", "replication"])
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let written = offset(primary);
    assert!(written > 0);
    cluster.wait_until(Duration::from_secs(5), "the replica to catch up", |_| {
        offset(replica) >= written
    });

    cluster.node_mut(primary).kill();
    let killed = Instant::now();
    let mut failed = 0;
    let mut steady_ok = 0;
    let resumed = loop {
        match limiter.allow(key).await {
            Ok(d) => {
                assert!(d.allowed);
                admitted += 1;
                break killed.elapsed();
            }
            // Fail closed: an error, never a silent allow.
            Err(_) => failed += 1,
        }
        // Keys on the other primaries keep working during the outage.
        if limiter.allow(&steady).await.is_ok() {
            steady_ok += 1;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no decision succeeded within 20 s of the primary's death ({failed} failed)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        failed > 0,
        "the key's primary was dead, yet the first decision succeeded"
    );
    assert!(
        steady_ok > 0,
        "keys on healthy primaries failed during the outage"
    );
    assert!(
        cluster.is_primary(replica),
        "the replica on {replica} was promoted"
    );
    assert!(
        resumed < Duration::from_secs(10),
        "decisions resumed only after {resumed:?}"
    );
    // The replicated state survived the failover. The client may still be
    // settling on the new topology (a connection to the killed primary
    // answering with an error once more), so the peek gets a few seconds.
    let settling = std::time::Instant::now();
    let peek = loop {
        match limiter.allow_n(key, 0).await {
            Ok(peek) => break peek,
            Err(err) if settling.elapsed() < Duration::from_secs(5) => {
                eprintln!("peek after the failover: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("no peek succeeded within 5 s of the failover: {err}"),
        }
    };
    assert_eq!(peek.remaining, LIMIT - admitted);
    assert_eq!(cli(replica, &["EXISTS", &state_key]), "1");
    eprintln!("decisions resumed {resumed:?} after the primary was killed ({failed} failed meanwhile)");
}

/// Retries `call` for up to 5 s while the client settles on the topology a
/// failover left.
async fn settled<T>(mut call: impl AsyncFnMut() -> Result<T, tollgate::Error>) -> T {
    let settling = Instant::now();
    loop {
        match call().await {
            Ok(value) => return value,
            Err(err) if settling.elapsed() < Duration::from_secs(5) => {
                eprintln!("after the failover: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("no call succeeded within 5 s of the failover: {err}"),
        }
    }
}

#[tokio::test]
async fn permits_survive_a_primary_failing_over_to_its_replica() {
    let mut cluster = Cluster::start(3, 1, 1_000);
    let backend = RedisBackend::builder()
        .timeout(Duration::from_millis(200))
        .connect_cluster(&cluster.urls())
        .await
        .unwrap();
    let policy = tollgate::Policy::new(Strategy::Concurrency, 3, Duration::from_secs(60)).unwrap();
    let limiter = Arc::new(
        Limiter::builder()
            .backend(backend)
            .policy(policy)
            .build()
            .unwrap(),
    );
    let key = "{failing}:streams";
    let primary = cluster.owner(cluster.slot(&format!("tollgate::concurrency:{key}")));
    let replica = cluster.replicas_of(primary)[0];
    let mut held = Vec::new();
    for _ in 0..2 {
        let permit = limiter.acquire_permit(key, 1).await.unwrap();
        held.push(permit.detach().expect("room for two"));
    }
    let offset = |port: u16| -> u64 {
        cli(port, &["INFO", "replication"])
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let written = offset(primary);
    cluster.wait_until(Duration::from_secs(5), "the replica to catch up", |_| {
        offset(replica) >= written
    });
    cluster.node_mut(primary).kill();
    let killed = Instant::now();
    // Fail closed while the primary is down, then the replica answers.
    let third = loop {
        if let Ok(permit) = limiter.acquire_permit(key, 1).await {
            break permit;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no acquire succeeded within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        cluster.is_primary(replica),
        "the replica on {replica} was promoted"
    );
    assert!(third.decision().allowed, "one slot of three was free");
    assert_eq!(
        third.decision().remaining,
        0,
        "the two replicated permits still hold"
    );
    let fourth = settled(|| limiter.acquire_permit(key, 1)).await;
    assert!(!fourth.decision().allowed, "the limit holds after the failover");
    // The permits made before the failover are released on the new primary.
    for id in held {
        let released = settled(|| limiter.release_permit(key, id)).await;
        assert!(released.decision.allowed, "a replicated permit is released once");
    }
    assert!(third.release().await.unwrap());
    let peek = settled(|| limiter.acquire_permit(key, 0)).await;
    assert_eq!(peek.decision().remaining, 3, "every slot came back");
}
