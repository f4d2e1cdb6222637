//! The PostgreSQL backend behind a bad network (`tollgate_test_support::fault_proxy`
//! between the backend and the server): latency with jitter, replies lost
//! at random under concurrent load, and partitions (one-way, the replies
//! lost; both ways, a stall) healed. In each, the store admits at most
//! the limit, and never more than the callers saw admitted plus the calls
//! that got no answer (SEMANTICS.md, "A call whose answer did not come
//! back": such a call may have been charged); every call ends within the
//! timeout plus a quantum, and the store decides again within a second of
//! the heal. A leasing limiter and a reserving one keep their bounds
//! too: the store holds at least what the leasing callers saw admitted
//! (and, once the leases ended, at most that plus a lease for each call
//! that got no answer), and no more reservations are made than the
//! bucket's slots and what cancels gave back (an unanswered cancel counted
//! as given back).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::protection::Lease;
use tollgate::{Decision, Error, Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;
use tollgate_test_support::fault_proxy::{FaultProxy, Faults};

use crate::support::{server_addr, TestDatabase};

/// The backend's timeout (and connect timeout) in these scenarios.
const TIMEOUT: Duration = Duration::from_millis(500);
/// Slack for a call past its timeout: scheduling on a loaded 2-core VM.
const QUANTUM: Duration = Duration::from_millis(250);

/// A database behind a proxy, a fixed window of `limit` a day (nothing
/// refills during a test) through the proxy, and one straight to the
/// server to read the store's count.
struct Setup {
    _db: TestDatabase,
    proxy: FaultProxy,
    /// The backend through the proxy.
    backend: PostgresBackend,
    policy: Policy,
    through: Arc<Limiter<PostgresBackend>>,
    direct: Limiter<PostgresBackend>,
}

impl Setup {
    async fn start(limit: u64) -> Self {
        let db = TestDatabase::create().await;
        let proxy = FaultProxy::start(server_addr());
        let policy = Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(86_400)).unwrap();
        let build = |backend: PostgresBackend| {
            Limiter::builder()
                .backend(backend)
                .policy(policy)
                .build()
                .unwrap()
        };
        let through = PostgresBackend::builder(db.url_through(proxy.addr()))
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .pool_size(4)
            .sweep_interval(None)
            .connect()
            .await
            .unwrap();
        let direct = PostgresBackend::builder(db.url()).connect().await.unwrap();
        let backend = through.clone();
        let (through, direct) = (Arc::new(build(through)), build(direct));
        // A connection open and the statement prepared before any fault.
        through.allow_n("warm-up", 0).await.unwrap();
        Self {
            _db: db,
            proxy,
            backend,
            policy,
            through,
            direct,
        }
    }

    /// The units the store holds for `key` (a peek straight to the server).
    async fn held(&self, key: &str) -> u64 {
        let peek = self.direct.allow_n(key, 0).await.unwrap();
        peek.limit - peek.remaining
    }
}

/// One decision through the proxy, timed: its answer and how long it took.
async fn timed(limiter: &Limiter<PostgresBackend>, key: &str) -> (Result<Decision, Error>, Duration) {
    let started = Instant::now();
    let answer = limiter.allow(key).await;
    (answer, started.elapsed())
}

/// What the callers saw: units admitted, calls unanswered (possibly
/// charged).
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    admitted: u64,
    unanswered: u64,
}

impl Seen {
    /// Counts `answer`, which must have come within the timeout.
    fn count(&mut self, (answer, took): (Result<Decision, Error>, Duration)) {
        assert!(took < TIMEOUT + QUANTUM, "{took:?} past the timeout");
        match answer {
            Ok(d) => self.admitted += u64::from(d.allowed),
            Err(Error::Backend(_)) => self.unanswered += 1,
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    /// The bound: the store admitted at most `limit`, at least what the
    /// callers saw admitted, at most that plus the unanswered calls.
    fn check(&self, held: u64, limit: u64) {
        assert!(
            held <= limit && self.admitted <= held && held <= self.admitted + self.unanswered,
            "the store holds {held} of {limit}: {self:?}"
        );
    }
}

/// Decides on `key` until a decision is answered, within a second of now;
/// counts every call in `seen`.
async fn until_decided(setup: &Setup, key: &str, seen: &mut Seen) -> Duration {
    let healed = Instant::now();
    loop {
        let (answer, took) = timed(&setup.through, key).await;
        let answered = answer.is_ok();
        seen.count((answer, took));
        if answered {
            return healed.elapsed();
        }
        assert!(
            healed.elapsed() < Duration::from_secs(1),
            "not deciding a second after the heal: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_with_jitter_changes_no_decision() {
    let setup = Setup::start(20).await;
    setup.proxy.set(Faults {
        latency: Duration::from_millis(50),
        jitter: Duration::from_millis(20),
        ..Faults::default()
    });
    let mut admitted = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..30 {
        let (answer, took) = timed(&setup.through, "k").await;
        slowest = slowest.max(took);
        admitted += u64::from(answer.unwrap().allowed);
    }
    assert_eq!(admitted, 20, "exactly the limit");
    assert_eq!(setup.held("k").await, 20);
    assert!(slowest < TIMEOUT, "{slowest:?}: two 30-70 ms legs");
}

/// Runs `calls` decisions on `key` in each of four tasks at once; what
/// they saw.
async fn load(setup: &Setup, key: &'static str, calls: usize) -> Seen {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let through = setup.through.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Seen::default();
            for _ in 0..calls {
                seen.count(timed(&through, key).await);
            }
            seen
        }));
    }
    let mut seen = Seen::default();
    for task in tasks {
        let task = task.await.expect("a deciding task panicked");
        seen.admitted += task.admitted;
        seen.unanswered += task.unanswered;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_lost_at_random_under_load_keep_the_bound() {
    const LIMIT: u64 = 100;
    let setup = Setup::start(LIMIT).await;
    // One reply in five cut off in flight, its connection with it (no
    // loss in 80 calls: one chance in 10^7).
    setup.proxy.set(Faults {
        reply_loss_ppm: 200_000,
        ..Faults::default()
    });
    // 80 calls, below the limit: every charge is one the callers saw
    // admitted or got no answer for.
    let mut seen = load(&setup, "k", 20).await;
    let held = setup.held("k").await;
    eprintln!("random loss, 80 calls: {seen:?}, the store holds {held}");
    assert!(seen.unanswered > 0, "no reply was lost");
    seen.check(held, LIMIT);
    // 80 more: the limit is reached, never passed.
    let more = load(&setup, "k", 20).await;
    seen.admitted += more.admitted;
    seen.unanswered += more.unanswered;
    setup.proxy.heal();
    let back = until_decided(&setup, "k", &mut seen).await;
    let held = setup.held("k").await;
    eprintln!("random loss, 160 calls: {seen:?}, the store holds {held}; deciding {back:?} after the heal");
    assert_eq!(held, LIMIT, "160 calls fill a limit of 100");
    seen.check(held, LIMIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_charge_at_most_what_was_sent_and_the_store_decides_again_after_the_heal() {
    const LIMIT: u64 = 10;
    let setup = Setup::start(LIMIT).await;
    let mut seen = Seen::default();
    for _ in 0..2 {
        seen.count(timed(&setup.through, "k").await);
    }
    // One way (the calls run, their replies are lost), then both ways (a
    // stall: the calls wait in the proxy and run after the heal).
    let one_way = Faults {
        replies_lost: true,
        ..Faults::default()
    };
    let both_ways = Faults {
        stall: true,
        ..Faults::default()
    };
    for (name, faults) in [("one way", one_way), ("both ways", both_ways)] {
        setup.proxy.set(faults);
        let before = seen;
        for _ in 0..3 {
            let (answer, took) = timed(&setup.through, "k").await;
            assert!(matches!(answer, Err(Error::Backend(_))), "{name}: {answer:?}");
            seen.count((answer, took));
        }
        assert_eq!(seen.unanswered, before.unanswered + 3);
        setup.proxy.heal();
        let back = until_decided(&setup, "k", &mut seen).await;
        let held = setup.held("k").await;
        eprintln!("{name}: {seen:?}, the store holds {held}; deciding {back:?} after the heal");
        seen.check(held, LIMIT);
    }
    for _ in 0..20 {
        seen.count(timed(&setup.through, "k").await);
    }
    let held = setup.held("k").await;
    assert_eq!(held, LIMIT, "the limit is reached, never passed");
    seen.check(held, LIMIT);
}

/// The longest a reservation waits in the scenarios below: two hours, in
/// which the token bucket of 24 a day below has two slots past its burst
/// (one every 3,600 s).
const MAX_WAIT: Duration = Duration::from_secs(7_200);

/// A leasing limiter and a reserving one through the proxy: the first on
/// the setup's policy (so that [`Setup::held`] reads its key), leasing up
/// to 8 units for a minute; the second on a token bucket of the same limit
/// a day, whose slots past the burst come every 86,400 s / `limit`, and
/// nothing refills during a test.
fn ahead(setup: &Setup, limit: u64) -> (Limiter<PostgresBackend>, Limiter<PostgresBackend>) {
    let leasing = Limiter::builder()
        .backend(setup.backend.clone())
        .policy(setup.policy)
        .lease(Lease::new(8, Duration::from_secs(60)))
        .build()
        .unwrap();
    let reserving = Limiter::builder()
        .backend(setup.backend.clone())
        .policy(Policy::new(Strategy::TokenBucket, limit, Duration::from_secs(86_400)).unwrap())
        .resource("reserved")
        .build()
        .unwrap();
    (leasing, reserving)
}

/// What the callers of the leasing and the reserving limiter saw.
#[derive(Clone, Copy, Debug, Default)]
struct AheadSeen {
    /// Requests of the leasing limiter: admitted, and unanswered (the
    /// store may have charged them, a lease with them).
    leased: Seen,
    reserved: u64,
    /// Reservations made that wait (every other one is given back).
    waiting: u64,
    reserve_unanswered: u64,
    /// Cancels confirmed, and unanswered (the store may have given back).
    cancelled: u64,
    cancel_unanswered: u64,
}

impl AheadSeen {
    /// One request of each limiter, and a cancel of every other
    /// reservation that waits (the last one made, which a cancel can give
    /// back while it waits); each call ends within the timeout.
    async fn step(&mut self, (leasing, reserving): &(Limiter<PostgresBackend>, Limiter<PostgresBackend>)) {
        let started = Instant::now();
        let answer = leasing.allow("leased").await;
        self.leased.count((answer, started.elapsed()));
        let started = Instant::now();
        let reservation = reserving.reserve_n("reserved", 1, MAX_WAIT).await;
        assert!(
            started.elapsed() < TIMEOUT + QUANTUM,
            "a reservation past the timeout"
        );
        let Ok(reservation) = reservation else {
            self.reserve_unanswered += 1;
            return;
        };
        self.reserved += u64::from(reservation.is_reserved());
        if !reservation.is_reserved() || reservation.delay().is_zero() {
            return;
        }
        self.waiting += 1;
        if self.waiting % 2 == 1 {
            return;
        }
        let started = Instant::now();
        match reserving.cancel(reservation).await {
            Ok(given_back) => self.cancelled += u64::from(given_back),
            Err(_) => self.cancel_unanswered += 1,
        }
        assert!(started.elapsed() < TIMEOUT + QUANTUM, "a cancel past the timeout");
    }

    /// The bounds: the leasing limiter's store holds at least what its
    /// callers saw admitted, and at most the limit; no more reservations
    /// were made than the bucket's slots within the longest wait (its
    /// burst and two more) and what cancels gave back, an unanswered
    /// cancel counted as given back.
    fn check(&self, held: u64, limit: u64) {
        assert!(
            self.leased.admitted <= held && held <= limit,
            "the store holds {held} of {limit}: {self:?}"
        );
        assert!(
            self.reserved <= limit + 2 + self.cancelled + self.cancel_unanswered,
            "{} reserved of {limit} slots and two: {self:?}",
            self.reserved
        );
    }
}

/// Runs the leasing and the reserving limiter under `faults` for `during`
/// steps, after `before` healthy ones and until both answer again after
/// the heal, then checks the bounds; ends the leases and checks that what
/// the store holds is what was admitted, plus at most a lease and a request
/// (9 units) for each request that got no answer. What the callers saw,
/// and what the store holds once the leases ended.
async fn ahead_under(faults: Faults, (before, during): (usize, usize)) -> (AheadSeen, u64) {
    const LIMIT: u64 = 24;
    let setup = Setup::start(LIMIT).await;
    let limiters = ahead(&setup, LIMIT);
    let mut seen = AheadSeen::default();
    for _ in 0..before {
        seen.step(&limiters).await;
    }
    setup.proxy.set(faults);
    for _ in 0..during {
        seen.step(&limiters).await;
    }
    setup.proxy.heal();
    let healed = Instant::now();
    loop {
        let answered = (seen.leased.unanswered, seen.reserve_unanswered);
        seen.step(&limiters).await;
        if answered == (seen.leased.unanswered, seen.reserve_unanswered) {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(2),
            "not deciding after the heal: {seen:?}"
        );
    }
    for _ in 0..LIMIT + 8 {
        seen.step(&limiters).await;
    }
    seen.check(setup.held("leased").await, LIMIT);
    limiters.0.end_leases().await.unwrap();
    let held = setup.held("leased").await;
    eprintln!("{faults:?}: {seen:?}, the store holds {held} after the leases ended");
    let admitted = seen.leased.admitted;
    assert!(
        (admitted..=admitted + 9 * seen.leased.unanswered).contains(&held),
        "the store holds {held} for {admitted} admitted: {seen:?}"
    );
    (seen, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_reservations_under_latency_with_jitter_decide_exactly() {
    let (seen, held) = ahead_under(
        Faults {
            latency: Duration::from_millis(30),
            jitter: Duration::from_millis(10),
            ..Faults::default()
        },
        (4, 12),
    )
    .await;
    assert_eq!(
        seen.leased.unanswered + seen.reserve_unanswered + seen.cancel_unanswered,
        0
    );
    assert_eq!(
        (seen.leased.admitted, held),
        (24, 24),
        "exactly the limit, every leased unit spent"
    );
    assert!(seen.cancelled > 0, "a waiting reservation was given back");
    // The burst and the two slots within the longest wait, the second
    // given back once and reserved again.
    assert_eq!((seen.reserved, seen.cancelled), (27, 1), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_reservations_losing_replies_at_random_keep_their_bounds() {
    let (seen, _) = ahead_under(
        Faults {
            reply_loss_ppm: 200_000,
            ..Faults::default()
        },
        (4, 30),
    )
    .await;
    assert!(
        seen.leased.unanswered + seen.reserve_unanswered > 0,
        "no reply was lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_reservations_across_partitions_keep_their_bounds() {
    for faults in [
        Faults {
            replies_lost: true,
            ..Faults::default()
        },
        Faults {
            stall: true,
            ..Faults::default()
        },
    ] {
        let (seen, _) = ahead_under(faults, (6, 2)).await;
        assert!(seen.reserve_unanswered >= 2, "{faults:?}: {seen:?}");
    }
}
