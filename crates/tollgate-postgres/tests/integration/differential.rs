//! Differential tests: on random traces, the SQL functions make exactly
//! the decisions of tollgate's pure strategy functions at microsecond
//! ticks (`decide` for one limit, `decide_all` for a compound policy,
//! `charge_all` for reports, `refund` and `penalty` for operations); and
//! reservations, cancels and leases agree with the core's custom-store
//! adapter on the same clock at microsecond ticks, which runs the pure
//! `reserve_all`, `cancel_all`, `give_back` and `lease_all`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::{Answer, Backend, Binding, Call, LeaseAsk, Scope, Tick};
use tollgate::calendar::{Calendar, Period};
use tollgate::clock::{Clock, ManualClock};
use tollgate::protection::Lease;
use tollgate::strategy::{self, LimitRate, State};
use tollgate::testing::MapStore;
use tollgate::{Decision, Limit, Limiter, Operation, Policy, Reservation, Strategy};
use tollgate_postgres::PostgresBackend;

use crate::support::TestDatabase;

/// 2023-11-14, in nanoseconds since the epoch.
pub(crate) const START: u64 = 1_700_000_000_000_000_000;

/// What a step of a trace does to its key.
#[derive(Clone, Copy, Debug)]
enum Act {
    Decide(u64),
    Charge(u64),
    Refund(u64),
    Penalty(u64),
    Reset,
}

/// One step: a clock change in nanoseconds (now and then backwards), a key
/// index and an act (peeks, costs above the limit and the largest cost
/// included).
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(i64, usize, Act)>> {
    let cost = prop_oneof![30 => 0u64..7, 1 => Just(u64::MAX)];
    let act = prop_oneof![
        12 => cost.prop_map(Act::Decide),
        2 => (1u64..9).prop_map(Act::Charge),
        1 => (0u64..5).prop_map(Act::Refund),
        1 => (0u64..5).prop_map(Act::Penalty),
        1 => Just(Act::Reset),
    ];
    let dt = prop_oneof![3 => 0i64..3_000_000, 3 => 0i64..3_000_000_000, 1 => 0i64..12_000_000_000, 1 => -3_000_000i64..0];
    prop::collection::vec((dt, 0usize..3, act), 1..60)
}

/// A limit of any strategy, 1 to 8 units, a window of 1 µs to 2 s.
fn any_limit() -> impl proptest::strategy::Strategy<Value = Limit> {
    (
        0usize..4,
        1u64..9,
        prop_oneof![1u64..5_000, 1_000u64..2_000_000_000],
    )
        .prop_map(|(s, limit, us)| {
            Limit::new(Strategy::ALL[s], limit, Duration::from_nanos(us.max(1) * 1_000)).expect("valid limit")
        })
}

/// A policy of one limit, or a compound policy of two to four (limits
/// repeating a strategy and window dropped).
pub(crate) fn any_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    prop_oneof![
        any_limit().prop_map(Policy::from),
        prop::collection::vec(any_limit(), 2..5).prop_map(|mut limits| {
            let mut seen = HashSet::new();
            limits.retain(|l| seen.insert((l.strategy(), l.window())));
            Policy::compound(limits).expect("valid compound policy")
        }),
    ]
}

/// A database, a backend on a manual clock, and a fresh key prefix per case.
pub(crate) struct Harness {
    _db: TestDatabase,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) clock: ManualClock,
    backend: PostgresBackend,
    case: AtomicU64,
}

impl Harness {
    pub(crate) fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let clock = ManualClock::default();
        let (db, backend) = rt.block_on(async {
            let db = TestDatabase::create().await;
            // The manual clock runs far ahead of real time: keep rows for
            // the whole run, so that the functions must treat expired state
            // as none by themselves.
            let backend = PostgresBackend::builder(db.url())
                .caller_clock(clock.clone())
                .expiry_grace(Duration::from_secs(3_600))
                .pool_size(2)
                .connect()
                .await
                .unwrap();
            (db, backend)
        });
        Self {
            _db: db,
            rt,
            clock,
            backend,
            case: AtomicU64::new(0),
        }
    }

    pub(crate) fn limiter(&self, policy: Policy) -> Limiter<PostgresBackend> {
        self.processes(policy, 1, None).remove(0)
    }

    /// `n` processes of `policy` under one fresh key prefix, leasing with
    /// `lease` on the harness's clock when given.
    fn processes(&self, policy: Policy, n: usize, lease: Option<Lease>) -> Vec<Limiter<PostgresBackend>> {
        let case = self.case.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|_| {
                let builder = Limiter::builder()
                    .backend(self.backend.clone())
                    .policy(policy)
                    .key_prefix(format!("case{case}"));
                match lease {
                    Some(lease) => builder.local_clock(self.clock.clone()).lease(lease).build(),
                    None => builder.build(),
                }
                .unwrap()
            })
            .collect()
    }

    /// `n` processes of `policy` on the core's custom-store adapter over
    /// one map, on the harness's clock at microsecond ticks, leasing with
    /// `lease` when given.
    fn on_store(
        &self,
        policy: Policy,
        n: usize,
        lease: Option<Lease>,
    ) -> Vec<Limiter<StoreBackend<Arc<MapStore>>>> {
        let store = Arc::new(MapStore::with_manual_clock(&self.clock));
        (0..n)
            .map(|_| {
                let builder = Limiter::builder()
                    .backend(
                        StoreBackend::new(store.clone())
                            .clock(self.clock.clone())
                            .tick(Tick::Micros),
                    )
                    .policy(policy);
                match lease {
                    Some(lease) => builder.local_clock(self.clock.clone()).lease(lease).build(),
                    None => builder.build(),
                }
                .unwrap()
            })
            .collect()
    }

    fn step(&self, dt: i64) {
        let now = self.clock.now_nanos();
        self.clock.set_nanos(now.saturating_add_signed(dt).max(START / 2));
    }
}

/// The policy's limits in microsecond ticks.
fn rates(policy: &Policy) -> Vec<LimitRate> {
    policy
        .limits()
        .iter()
        .map(|l| LimitRate {
            strategy: l.strategy(),
            rate: l.rate_micros(),
        })
        .collect()
}

/// The decision the pure functions make for `act` on `states` at `now`
/// (microseconds), and the states they leave; `None` for an operation.
fn expected(limits: &[LimitRate], states: &mut [Option<State>], now: u64, act: Act) -> Option<Decision> {
    let n = limits.len();
    let mut next = [None; Policy::MAX_LIMITS];
    let decided = match act {
        Act::Decide(cost) => strategy::decide_all(limits, states, &mut next[..n], now, cost),
        Act::Charge(cost) => strategy::charge_all(limits, states, &mut next[..n], now, cost),
        Act::Reset => {
            states.fill(None);
            return None;
        }
        Act::Refund(cost) | Act::Penalty(cost) => {
            for (state, l) in states.iter_mut().zip(limits) {
                *state = match act {
                    Act::Refund(_) => strategy::refund(l.strategy, &l.rate, *state, now, cost),
                    _ => strategy::penalty(l.strategy, &l.rate, *state, now, cost),
                };
            }
            return None;
        }
    };
    states.copy_from_slice(&next[..n]);
    Some(Decision::from_compound(decided, limits, Tick::Micros))
}

/// What the backend answers for `act` on `key`.
async fn actual(limiter: &Limiter<PostgresBackend>, key: &str, act: Act) -> Result<Option<Decision>, String> {
    let op = match act {
        Act::Decide(cost) => {
            return limiter
                .allow_n(key, cost)
                .await
                .map(Some)
                .map_err(|e| e.to_string())
        }
        Act::Charge(cost) => {
            return limiter
                .charge(key, cost)
                .await
                .map(Some)
                .map_err(|e| e.to_string())
        }
        Act::Reset => Operation::Reset,
        Act::Refund(cost) => Operation::Refund(cost),
        Act::Penalty(cost) => Operation::Penalty(cost),
    };
    limiter
        .operate(key, op)
        .await
        .map(|_| None)
        .map_err(|e| e.to_string())
}

#[test]
fn decisions_reports_and_operations_match_the_pure_functions() {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 160,
        ..Config::default()
    });
    runner
        .run(&(any_policy(), trace()), |(policy, trace)| {
            h.clock.set_nanos(START + 123_456_789);
            let limits = rates(&policy);
            let limiter = h.limiter(policy);
            let mut states = [[None; Policy::MAX_LIMITS]; 3];
            for (i, &(dt, key, act)) in trace.iter().enumerate() {
                h.step(dt);
                let now = h.clock.now_nanos() / 1_000;
                let want = expected(&limits, &mut states[key][..limits.len()], now, act);
                let got = h.rt.block_on(actual(&limiter, &format!("key-{key}"), act));
                let got = got.map_err(TestCaseError::fail)?;
                prop_assert_eq!(got, want, "step {} ({:?}) of {:?}", i, act, limits);
            }
            Ok(())
        })
        .unwrap();
}

/// Calendar periods in several time zones, around daylight-saving changes.
fn calendars() -> [Calendar; 3] {
    [
        Calendar::new(Period::Day, "America/New_York", Some("2026-03-08T02:30:00")).unwrap(),
        Calendar::new(Period::Week, "UTC", None).unwrap(),
        Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap(),
    ]
}

#[test]
fn calendar_windows_alone_and_with_other_limits_match_the_pure_functions() {
    let h = Harness::new();
    let hourly = Limit::new(Strategy::TokenBucket, 5, Duration::from_secs(3_600)).unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let hours =
        prop_oneof![3 => 0i64..3_600_000_000_000, 2 => 0i64..172_800_000_000_000, 1 => -60_000_000_000i64..0];
    let acts = prop::collection::vec((hours, 0usize..2, (0u64..4).prop_map(Act::Decide)), 1..60);
    runner
        .run(
            &(0usize..3, 1u64..6, any::<bool>(), acts),
            |(c, limit, with_rate, trace)| {
                let calendar = Limit::per_calendar(limit, calendars()[c]).unwrap();
                let policy = if with_rate {
                    Policy::compound(vec![calendar, hourly]).unwrap()
                } else {
                    Policy::from(calendar)
                };
                // 2026-03-07, a day before New York's clocks go forward.
                h.clock.set_nanos(1_772_900_000_000_000_000);
                let limits = rates(&policy);
                let limiter = h.limiter(policy);
                let mut states = [[None; Policy::MAX_LIMITS]; 2];
                for (i, &(dt, key, act)) in trace.iter().enumerate() {
                    h.step(dt);
                    let now = h.clock.now_nanos() / 1_000;
                    let want = expected(&limits, &mut states[key][..limits.len()], now, act);
                    let got = h.rt.block_on(actual(&limiter, &format!("key-{key}"), act));
                    prop_assert_eq!(
                        got.map_err(TestCaseError::fail)?,
                        want,
                        "step {} of {:?}",
                        i,
                        limits
                    );
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn a_block_denies_every_limit_until_it_ends_and_keeps_the_state() {
    let h = Harness::new();
    h.clock.set_nanos(START);
    let policy = Policy::compound(vec![
        Limit::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap(),
        Limit::new(Strategy::SlidingWindow, 10, Duration::from_secs(600)).unwrap(),
    ])
    .unwrap();
    let limiter = h.limiter(policy);
    assert!(h.rt.block_on(limiter.allow("k")).unwrap().allowed);
    h.rt.block_on(limiter.operate("k", Operation::Block(Duration::from_secs(30))))
        .unwrap();
    h.step(10_000_000_000);
    let denied = h.rt.block_on(limiter.allow("k")).unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(20)));
    // A refund during the block changes the state and keeps the block.
    h.rt.block_on(limiter.operate("k", Operation::Refund(1))).unwrap();
    assert!(!h.rt.block_on(limiter.allow("k")).unwrap().allowed);
    h.step(20_000_000_000);
    // The block is over; the refund gave the unit back: 3 of 3 left.
    let after = h.rt.block_on(limiter.allow("k")).unwrap();
    assert!(after.allowed);
    assert_eq!(after.remaining, 2);
    // A block of zero lifts a block at once.
    h.rt.block_on(limiter.operate("k", Operation::Block(Duration::from_secs(60))))
        .unwrap();
    h.rt.block_on(limiter.operate("k", Operation::Block(Duration::ZERO)))
        .unwrap();
    assert!(h.rt.block_on(limiter.allow("k")).unwrap().allowed);
}

/// A policy that reserves ahead and makes its reservations wait: one to
/// three buckets or sliding windows of 1 to 8 units per 10 ms to 10 s.
fn waiting_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    let limit = (
        prop_oneof![2 => Just(Strategy::SlidingWindow), 1 => Just(Strategy::TokenBucket), 1 => Just(Strategy::LeakyBucket)],
        1u64..9,
        10u64..10_000,
    )
        .prop_map(|(s, limit, ms)| Limit::new(s, limit, Duration::from_millis(ms)).expect("valid limit"));
    prop::collection::vec(limit, 1..4).prop_map(|mut limits| {
        let mut seen = HashSet::new();
        limits.retain(|l| seen.insert((l.strategy(), l.window())));
        if limits.len() == 1 {
            Policy::from(limits[0])
        } else {
            Policy::compound(limits).expect("valid compound policy")
        }
    })
}

#[test]
fn reservations_and_cancels_agree_with_the_store_adapter() {
    let h = Harness::new();
    reservations_agree(&h, any_policy(), 96);
    reservations_agree(&h, waiting_policy(), 96);
}

/// Random traces of reservations and cancels of `policies` on PostgreSQL
/// and on the store adapter agree: every decision, delay and cancel, and
/// the state they leave.
fn reservations_agree(h: &Harness, policies: impl proptest::strategy::Strategy<Value = Policy>, cases: u32) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    // A clock change (forwards only: a receipt's proceed time would be
    // passed again; often none, so that a cancel finds its reservation
    // waiting), a cost, the longest wait in milliseconds, and now and then
    // a cancel of the reservation that many back (most often the last,
    // the one a cancel can give back).
    let steps = prop::collection::vec(
        (
            prop_oneof![2 => Just(0u64), 3 => 0u64..2_000_000, 1 => 0u64..2_000_000_000],
            0u64..4,
            prop_oneof![1 => Just(0u64), 3 => 0u64..4_000],
            prop_oneof![6 => Just(None), 2 => Just(Some(0usize)), 2 => (1usize..3).prop_map(Some)],
        ),
        1..60,
    );
    runner
        .run(&(policies, steps), |(policy, steps)| {
            h.clock.set_nanos(START);
            let postgres = h.limiter(policy);
            let store = h.on_store(policy, 1, None).remove(0);
            let mut made: Vec<(Reservation, Reservation)> = Vec::new();
            for (i, &(dt, cost, max_ms, cancel)) in steps.iter().enumerate() {
                h.clock.advance(Duration::from_nanos(dt));
                if let Some(at) = cancel.and_then(|back| made.len().checked_sub(back + 1)) {
                    let (on_postgres, on_store) = made.remove(at);
                    let got = h.rt.block_on(postgres.cancel(on_postgres)).unwrap();
                    let want = h.rt.block_on(store.cancel(on_store)).unwrap();
                    prop_assert_eq!(got, want, "cancel at step {} of {}", i, policy);
                    continue;
                }
                let max_delay = Duration::from_millis(max_ms);
                let got = h.rt.block_on(postgres.reserve_n("k", cost, max_delay)).unwrap();
                let want = h.rt.block_on(store.reserve_n("k", cost, max_delay)).unwrap();
                prop_assert_eq!(got.decision(), want.decision(), "step {} of {}", i, policy);
                prop_assert_eq!(got.delay(), want.delay(), "step {} of {}", i, policy);
                prop_assert_eq!(
                    got.exceeds_max_delay(),
                    want.exceeds_max_delay(),
                    "step {} of {}",
                    i,
                    policy
                );
                if got.is_reserved() {
                    made.push((got, want));
                }
            }
            // What the reservations and cancels left.
            let got = h.rt.block_on(postgres.allow_n("k", 0)).unwrap();
            let want = h.rt.block_on(store.allow_n("k", 0)).unwrap();
            prop_assert_eq!(got, want, "the state after the trace of {}", policy);
            Ok(())
        })
        .unwrap();
}

#[test]
fn leases_of_two_processes_agree_with_the_store_adapter() {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 128,
        ..Config::default()
    });
    let gaps = prop_oneof![3 => 0u64..200_000, 1 => 0u64..50_000_000, 1 => 0u64..3_000_000_000];
    let trace = prop::collection::vec((gaps, 0usize..2, 0u64..3), 1..120);
    runner
        .run(
            &(any_policy(), 1u64..24, 1u64..200, trace),
            |(policy, max_units, age_ms, trace)| {
                let lease = Some(Lease::new(max_units, Duration::from_millis(age_ms)));
                h.clock.set_nanos(START);
                let postgres = h.processes(policy, 2, lease);
                let store = h.on_store(policy, 2, lease);
                for (i, &(dt, who, cost)) in trace.iter().enumerate() {
                    h.clock.advance(Duration::from_nanos(dt));
                    let got = h.rt.block_on(postgres[who].allow_n("k", cost)).unwrap();
                    let want = h.rt.block_on(store[who].allow_n("k", cost)).unwrap();
                    prop_assert_eq!(
                        got,
                        want,
                        "request {} (process {}, cost {}) of {}",
                        i,
                        who,
                        cost,
                        policy
                    );
                }
                // Each lease ended: its unspent units given back.
                for who in 0..2 {
                    let got = h.rt.block_on(postgres[who].end_leases()).unwrap();
                    let want = h.rt.block_on(store[who].end_leases()).unwrap();
                    prop_assert_eq!(got, want, "units given back by process {}", who);
                }
                let got = h.rt.block_on(postgres[0].allow_n("k", 0)).unwrap();
                let want = h.rt.block_on(store[0].allow_n("k", 0)).unwrap();
                prop_assert_eq!(got, want, "the state once every lease ended");
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn a_cancel_gives_back_only_the_last_reservation_of_a_sliding_window() {
    let h = Harness::new();
    h.clock.set_nanos(START);
    let policy = Policy::new(Strategy::SlidingWindow, 2, Duration::from_secs(1)).unwrap();
    let postgres = h.limiter(policy);
    let store = h.on_store(policy, 1, None).remove(0);
    let both = |cost: u64| {
        let got =
            h.rt.block_on(postgres.reserve_n("k", cost, Duration::from_secs(1)))
                .unwrap();
        let want =
            h.rt.block_on(store.reserve_n("k", cost, Duration::from_secs(1)))
                .unwrap();
        assert_eq!((got.decision(), got.delay()), (want.decision(), want.delay()));
        (got, want)
    };
    both(2);
    // The next window: the previous one's weight lets a unit through at
    // once (1 µs on), a second halfway through the window.
    h.clock.advance(Duration::from_secs(1));
    let first = both(1);
    let second = both(1);
    assert_eq!(first.0.delay(), Duration::from_micros(1));
    assert_eq!(second.0.delay(), Duration::from_micros(500_001));
    // Both wait and count in the same window; the first is no longer the
    // last charge on the key, so only the second is given back.
    let cancel = |(on_postgres, on_store): (Reservation, Reservation)| {
        let got = h.rt.block_on(postgres.cancel(on_postgres)).unwrap();
        assert_eq!(got, h.rt.block_on(store.cancel(on_store)).unwrap());
        got
    };
    assert!(!cancel(first), "a later reservation charged the window since");
    assert!(cancel(second));
    let got = h.rt.block_on(postgres.allow_n("k", 0)).unwrap();
    assert_eq!(got, h.rt.block_on(store.allow_n("k", 0)).unwrap());
}

/// A call straight to a binding, beside a clock change.
#[derive(Clone, Copy, Debug)]
enum AheadCall {
    /// A lease call: its cost, the units it wants, the lessee (one of
    /// three), and the units it gives back of the lease the last lease call
    /// answered (before that answer's time, which the clock may have
    /// passed).
    Lease(u64, u64, u64, u64),
    /// A reservation of a cost, waiting at most so many milliseconds.
    Reserve(u64, u64),
    /// A cancel of the last reservation made.
    Cancel,
    /// A block of the key for so many milliseconds (0 lifts it).
    Block(u64),
}

fn ahead_calls() -> impl proptest::strategy::Strategy<Value = Vec<(u64, AheadCall)>> {
    let call = prop_oneof![
        6 => (0u64..4, prop_oneof![1 => Just(0u64), 3 => 0u64..16], 0u64..3, prop_oneof![2 => Just(0u64), 1 => 0u64..12])
            .prop_map(|(cost, want, lessee, back)| AheadCall::Lease(cost, want, lessee, back)),
        3 => (0u64..4, prop_oneof![1 => Just(0u64), 3 => 0u64..4_000]).prop_map(|(cost, ms)| AheadCall::Reserve(cost, ms)),
        2 => Just(AheadCall::Cancel),
        1 => (0u64..5).prop_map(AheadCall::Block),
    ];
    let dt = prop_oneof![2 => Just(0u64), 2 => 0u64..200_000, 2 => 0u64..5_000_000, 1 => 0u64..3_000_000_000];
    prop::collection::vec((dt, call), 1..60)
}

#[test]
fn leases_reservations_cancels_and_blocks_agree_with_the_store_adapter_call_by_call() {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 160,
        ..Config::default()
    });
    // A lease's age in milliseconds: one for every process, as one
    // policy's processes share their settings.
    runner
        .run(
            &(any_policy(), 1u64..200, ahead_calls()),
            |(policy, age_ms, calls)| {
                h.clock.set_nanos(START);
                let prefix = format!("calls{}", h.case.fetch_add(1, Ordering::Relaxed));
                let scope = Scope {
                    prefix: &prefix,
                    resource: "",
                    policy: &policy,
                };
                let postgres = h.backend.bind(&scope).unwrap();
                let store = StoreBackend::new(Arc::new(MapStore::with_manual_clock(&h.clock)))
                    .clock(h.clock.clone())
                    .tick(Tick::Micros)
                    .bind(&scope)
                    .unwrap();
                let mut before = u64::MAX;
                let mut receipts = None;
                for (i, &(dt, call)) in calls.iter().enumerate() {
                    h.clock.advance(Duration::from_nanos(dt));
                    let (got, want) = match call {
                        AheadCall::Lease(cost, want, lessee, back) => {
                            let age = Duration::from_millis(age_ms);
                            let ask = LeaseAsk::new(cost, want, lessee, age).returning(back, before);
                            (
                                h.rt.block_on(postgres.call(Call::Lease { key: b"k", ask })),
                                h.rt.block_on(store.call(Call::Lease { key: b"k", ask })),
                            )
                        }
                        AheadCall::Reserve(cost, ms) => {
                            let max_delay = Duration::from_millis(ms);
                            (
                                h.rt.block_on(postgres.call(Call::Reserve {
                                    key: b"k",
                                    cost,
                                    max_delay,
                                })),
                                h.rt.block_on(store.call(Call::Reserve {
                                    key: b"k",
                                    cost,
                                    max_delay,
                                })),
                            )
                        }
                        AheadCall::Cancel => {
                            let Some((on_postgres, on_store)) = receipts.take() else {
                                continue;
                            };
                            (
                                h.rt.block_on(postgres.call(Call::Cancel {
                                    key: b"k",
                                    receipt: &on_postgres,
                                })),
                                h.rt.block_on(store.call(Call::Cancel {
                                    key: b"k",
                                    receipt: &on_store,
                                })),
                            )
                        }
                        AheadCall::Block(ms) => {
                            let op = Operation::Block(Duration::from_millis(ms));
                            (
                                h.rt.block_on(postgres.call(Call::Operate { key: b"k", op })),
                                h.rt.block_on(store.call(Call::Operate { key: b"k", op })),
                            )
                        }
                    };
                    let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let want = want.unwrap();
                    match (&got, &want) {
                        (Answer::Leased(leased), _) => before = leased.return_before,
                        (Answer::Reserved(on_postgres), Answer::Reserved(on_store)) => {
                            receipts = on_postgres.receipt.zip(on_store.receipt);
                            if let Some((on_postgres, on_store)) = receipts {
                                prop_assert_eq!(on_postgres, on_store, "receipt of call {} of {}", i, policy);
                            }
                            // Otherwise the store adapter's receipt is of a
                            // reservation only decided (a fixed window's),
                            // which nothing can give back: it does not wait.
                            let (mut got, mut want) = (on_postgres.clone(), on_store.clone());
                            (got.receipt, want.receipt) = (None, None);
                            prop_assert_eq!(got, want, "call {} ({:?}) of {}", i, call, policy);
                            continue;
                        }
                        _ => {}
                    }
                    prop_assert_eq!(&got, &want, "call {} ({:?}) of {}", i, call, policy);
                }
                Ok(())
            },
        )
        .unwrap();
}
