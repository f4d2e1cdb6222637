//! Compound policies on Redis: several limits on one key decided by one
//! script call. Many tasks on separate connections admit exactly what the
//! tightest limit allows and charge every limit exactly that, a request one
//! limit denies charges none, the state keys follow the compound layout, and
//! binding names the limit whose arithmetic the scripts cannot do exactly.
//! (Random traces against `decide_all` and the in-memory backend are in
//! `differential.rs`, several processes in `processes.rs`, a cluster in
//! `cluster.rs`.)

use crate::support;

use std::time::Duration;

use support::limiters::{connect_many, hammer, limiters};
use support::window_count;
use tollgate::backend::BackendErrorKind;
use tollgate::backend::CompoundKeys;
use tollgate::clock::ManualClock;
use tollgate::{Error, Limit, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

fn limit(strategy: Strategy, limit: u64, window: Duration) -> Limit {
    Limit::new(strategy, limit, window).unwrap()
}

/// 50 years: the fixed window's epoch-aligned buckets have their
/// boundaries in 2020 and 2070, so nothing rolls over during a test.
const DECADES: Duration = Duration::from_secs(50 * 365 * 24 * 3600);
const HOUR: Duration = Duration::from_secs(3_600);

/// The server's clock in microseconds.
fn server_micros(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
    parts.next().unwrap() * 1_000_000 + parts.next().unwrap()
}

/// Checks that the limit with state under `key` has been charged exactly
/// `units`: a window's count, or a bucket whose theoretical arrival time is
/// `units` emission intervals after a first request made between `from` and
/// `to` (server microseconds).
fn assert_charged(server: &RedisServer, key: &[u8], limit: &Limit, units: u64, (from, to): (u64, u64)) {
    let name = String::from_utf8(key.to_vec()).unwrap();
    let state = server.cli(&["GET", &name]);
    match limit.strategy() {
        Strategy::FixedWindow | Strategy::SlidingWindow => {
            assert_eq!(window_count(&state), units, "{name}: {state}")
        }
        Strategy::TokenBucket | Strategy::LeakyBucket => {
            let tat: u64 = state.parse().unwrap();
            let first = tat - units * limit.rate_micros().interval;
            assert!((from..=to).contains(&first), "{name}: {state}, charged {units}");
        }
        Strategy::Concurrency => unreachable!("compound policies hold rates"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_on_separate_connections_admit_exactly_the_tightest_limit_and_charge_every_limit() {
    let server = RedisServer::start();
    let backends = connect_many(RedisBackend::builder(), &server.url(), 4).await;
    let policies = [
        // The sliding window binds.
        Policy::compound([
            limit(Strategy::FixedWindow, 50, DECADES),
            limit(Strategy::SlidingWindow, 40, HOUR),
        ])
        .unwrap(),
        // The bucket binds (one unit per 120 s: nothing refills meanwhile).
        Policy::compound([
            limit(Strategy::TokenBucket, 30, HOUR),
            limit(Strategy::FixedWindow, 50, DECADES),
        ])
        .unwrap(),
    ];
    for (i, policy) in policies.into_iter().enumerate() {
        // Limits of one strategy and window share state within a resource.
        let limiters = limiters(&backends, policy, &format!("compound-{i}"));
        let tightest = policy.limits().iter().map(Limit::limit).min().unwrap();
        for (key, cost) in [("unit", 1), ("weighted", 3)] {
            let from = server_micros(&server);
            // 512 requests, far more than any limit.
            let admitted = hammer(&limiters, key, cost).await;
            let to = server_micros(&server);
            assert_eq!(admitted, tightest / cost * cost, "{policy}, cost {cost}");
            let keys = support::bound(
                &backends[0],
                Limiter::DEFAULT_KEY_PREFIX,
                &format!("compound-{i}"),
                &policy,
            )
            .state_keys(key.as_bytes());
            for (state_key, limit) in keys.iter().zip(policy.limits()) {
                assert_charged(&server, state_key, limit, admitted, (from, to));
            }
        }
    }
}

/// A burst cap of 60 per second and a sustained cap of 100 per hour.
fn burst_and_sustained() -> Policy {
    Policy::compound([
        limit(Strategy::FixedWindow, 60, Duration::from_secs(1)),
        limit(Strategy::TokenBucket, 100, HOUR),
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_on_one_key_never_charge_a_limit_for_a_denied_request() {
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    // The manual clock stands still while real time runs: keep keys alive
    // for the whole test.
    let builder = RedisBackend::builder()
        .caller_clock(clock.clone())
        .expiry_grace(HOUR);
    let backends = connect_many(builder, &server.url(), 4).await;
    let limiters = limiters(&backends, burst_and_sustained(), "burst");
    // The burst cap admits 60 of the first 512 requests. Two seconds later
    // it admits again, and the hourly bucket (one unit per 36 s) has the 40
    // units left that it would have had the burst cap's denials charged
    // it nothing.
    assert_eq!(hammer(&limiters, "hot", 1).await, 60);
    clock.advance(Duration::from_secs(2));
    assert_eq!(hammer(&limiters, "hot", 1).await, 40);
    let denied = limiters[0].allow("hot").await.unwrap();
    assert_eq!((denied.allowed, denied.bound_by, denied.limit), (false, 1, 100));
}

#[tokio::test]
async fn compound_state_keys_share_a_layout_and_expire_with_their_state() {
    let server = RedisServer::start();
    // A caller clock a quarter second past a whole second: the states and
    // their expiries follow from it exactly.
    let t0: u64 = 1_700_000_000_250_000;
    let clock = ManualClock::new(Duration::from_micros(t0));
    let backend = RedisBackend::builder()
        .caller_clock(clock.clone())
        .expiry_grace(HOUR)
        .connect(&server.url())
        .await
        .unwrap();
    let limits = [
        limit(Strategy::TokenBucket, 2, Duration::from_millis(400)),
        limit(Strategy::FixedWindow, 1, HOUR),
    ];
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .policy(Policy::compound(limits).unwrap())
        .key_prefix("app")
        .resource("login")
        .build()
        .unwrap();
    let layout = CompoundKeys::new("app", "login", &limits);
    let names: Vec<String> = (0..2)
        .map(|i| String::from_utf8(layout.key(i, b"user:{42}")).unwrap())
        .collect();
    let bound: Vec<Vec<u8>> = names.iter().map(|n| n.clone().into_bytes()).collect();
    assert_eq!(
        support::bound(&backend, "app", "login", limiter.policy()).state_keys(b"user:{42}"),
        bound
    );
    let get = |name: &str| server.cli(&["GET", name]);
    let exists = |name: &str| server.cli(&["EXISTS", name]);

    // A peek on a fresh key creates nothing.
    assert!(limiter.allow_n("user:{42}", 0).await.unwrap().allowed);
    assert_eq!((exists(&names[0]), exists(&names[1])), ("0".into(), "0".into()));

    // An admitted request writes both states: the bucket's theoretical
    // arrival time one emission interval (200 ms) ahead, the window's
    // hour-aligned start and count.
    let admitted = limiter.allow("user:{42}").await.unwrap();
    assert!(admitted.allowed);
    assert_eq!((admitted.remaining, admitted.bound_by), (0, 1));
    let tat = t0 + 200_000;
    let hour_start = t0 / 3_600_000_000 * 3_600_000_000;
    assert_eq!(get(&names[0]), tat.to_string());
    assert_eq!(get(&names[1]), format!("{hour_start}:1"));
    // Each key lives as long as its own state, plus the grace (less the
    // real time the test has taken since).
    for (name, expires_at) in [(&names[0], tat), (&names[1], hour_start + 3_600_000_000)] {
        let ttl = (expires_at - t0).div_ceil(1_000) + 3_600_000;
        let pttl: u64 = server.cli(&["PTTL", name]).parse().unwrap();
        assert!(
            pttl <= ttl && pttl + 10_000 > ttl,
            "{name}: PTTL {pttl}, expected {ttl}"
        );
    }

    // The window denies the next request; the bucket keeps its state.
    let denied = limiter.allow("user:{42}").await.unwrap();
    assert_eq!((denied.allowed, denied.bound_by), (false, 1));
    assert_eq!(get(&names[0]), tat.to_string());
    assert_eq!(get(&names[1]), format!("{hour_start}:1"));

    // Once the bucket's state has expired, the next decision deletes its
    // key (the window, still full, denies and keeps its own).
    clock.advance(Duration::from_millis(200));
    assert!(!limiter.allow("user:{42}").await.unwrap().allowed);
    assert_eq!((exists(&names[0]), exists(&names[1])), ("0".into(), "1".into()));
}

#[tokio::test]
async fn compound_decisions_survive_a_flushed_library_or_script_cache_and_reject_foreign_values() {
    let server = RedisServer::start();
    let policy = Policy::compound([
        limit(Strategy::FixedWindow, 60, DECADES),
        limit(Strategy::TokenBucket, 100, HOUR),
    ])
    .unwrap();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .policy(policy)
        .build()
        .unwrap();
    let function = support::bound_default(&backend, &policy)
        .function_name()
        .to_owned();
    let library = function.strip_suffix("_compound").unwrap().to_owned();
    let loaded = || {
        server
            .cli(&["FUNCTION", "LIST", "LIBRARYNAME", &library])
            .contains(&function)
    };
    assert!(!loaded());
    assert_eq!(limiter.allow("k").await.unwrap().remaining, 59);
    assert!(backend.uses_functions());
    assert!(loaded(), "the first decision loads the library");
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]), "OK");
    // The state survives; the library is loaded again.
    assert_eq!(limiter.allow("k").await.unwrap().remaining, 58);
    assert!(loaded());

    // A user refused functions gets scripts instead.
    let scripts = RedisBackend::connect(&server.url_without_functions())
        .await
        .unwrap();
    let by_script = Limiter::builder()
        .backend(scripts.clone())
        .policy(policy)
        .build()
        .unwrap();
    let by_script_binding = support::bound_default(&scripts, &policy);
    let sha = by_script_binding.script_sha().to_owned();
    assert_eq!(by_script.allow("k").await.unwrap().remaining, 57);
    assert!(!scripts.uses_functions());
    assert_eq!(server.cli(&["SCRIPT", "EXISTS", &sha]), "1");
    // Scripts set the expiry with PEXPIREAT: the token bucket's state
    // expires when its three tokens are back (3 × 36 s) plus the grace.
    let bucket = String::from_utf8(by_script_binding.state_keys(b"k")[1].clone()).unwrap();
    let pttl: u64 = server.cli(&["PTTL", &bucket]).parse().unwrap();
    assert!((100_000..=109_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    // The state survives; the script is sent again.
    assert_eq!(by_script.allow("k").await.unwrap().remaining, 56);
    assert_eq!(server.cli(&["SCRIPT", "EXISTS", &sha]), "1");
    // Both decide on one state.
    assert_eq!(limiter.allow("k").await.unwrap().remaining, 55);

    // A value that is no state fails the decision, naming its key, and the
    // other limit is not charged.
    let keys = support::bound_default(&backend, &policy).state_keys(b"foreign");
    let [window, bucket] = [&keys[0], &keys[1]].map(|k| String::from_utf8(k.clone()).unwrap());
    server.cli(&["SET", &bucket, "not a state"]);
    match limiter.allow("foreign").await {
        Err(Error::Backend(err)) => {
            assert_eq!(err.kind(), BackendErrorKind::Protocol, "{err}");
            assert!(err.to_string().contains(&bucket), "{err}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert_eq!(server.cli(&["EXISTS", &window]), "0");
}

#[tokio::test]
async fn binding_names_the_compound_limit_beyond_exact_script_arithmetic() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let day = Duration::from_secs(86_400);
    let build = |limits: [Limit; 2]| {
        Limiter::builder()
            .backend(backend.clone())
            .policy(Policy::compound(limits).unwrap())
            .build()
            .map(drop)
    };
    let field = |result: Result<(), Error>| match result {
        Err(Error::Config(err)) => err.field().to_owned(),
        other => panic!("expected a configuration error, got {other:?}"),
    };
    // A million a day is 8.64e16 for the sliding window's L × W.
    let sliding = limit(Strategy::SlidingWindow, 1_000_000, day);
    assert_eq!(
        field(build([limit(Strategy::TokenBucket, 10, day), sliding])),
        "limits[1].limit"
    );
    // 80 years is beyond 2^51 µs.
    let long = limit(Strategy::FixedWindow, 1, Duration::from_secs(80 * 365 * 86_400));
    assert_eq!(field(build([long, sliding])), "limits[0].window");
    build([
        limit(Strategy::TokenBucket, 1_000_000, day),
        limit(Strategy::SlidingWindow, 1_000, day),
    ])
    .unwrap();
}
