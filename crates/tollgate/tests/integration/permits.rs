//! Permits of requests in flight against the model of SEMANTICS.md's
//! "Requests in flight" (`tollgate_test_support::in_flight_model`), on
//! random traces under a manual clock: the in-memory backend and the
//! custom-store adapter answer every acquire, release and extend as the
//! model does, whether a permit is released and extended by identifier or
//! through the [`Permit`] that holds it, and with the in-memory janitor's
//! sweeps between the steps. Then what a [`Permit`] does when dropped, what
//! a reset and a sweep leave a held one, and what a limiter refuses.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Backend;
use tollgate::clock::ManualClock;
use tollgate::protection::DenyCache;
use tollgate::strategy::permits::PermitId;
use tollgate::testing::MapStore;
use tollgate::{Error, FailPolicy, KeyList, Limiter, Operation, Permit, Policy, Strategy};
use tollgate_test_support::in_flight_model::PermitsModel;

const START: u64 = 1_700_000_000_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One step of a trace.
#[derive(Clone, Debug)]
enum Op {
    /// Acquire, and either keep the `Permit` (`held`) or detach it.
    Acquire {
        key: u8,
        cost: u64,
        held: bool,
    },
    /// Release the `n`-th permit made so far (modulo their number).
    Release {
        n: usize,
    },
    Extend {
        n: usize,
    },
    Advance {
        nanos: u64,
    },
    /// The janitor's sweep of expired state (in memory; nothing elsewhere).
    Sweep,
}

fn op(limit: u64, ttl: u64) -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0..=limit + 1, any::<bool>()).prop_map(|(key, cost, held)| Op::Acquire { key, cost, held }),
        2 => any::<usize>().prop_map(|n| Op::Release { n }),
        1 => any::<usize>().prop_map(|n| Op::Extend { n }),
        3 => (0..ttl * 2).prop_map(|nanos| Op::Advance { nanos }),
        // To the tick a permit made now expires at.
        1 => Just(Op::Advance { nanos: ttl }),
        1 => Just(Op::Sweep),
    ]
}

fn trace() -> impl proptest::strategy::Strategy<Value = (u64, u64, Vec<Op>)> {
    // A ttl in whole microseconds, the resolution every backend shares.
    (1u64..6, 1u64..5_000).prop_flat_map(|(limit, micros)| {
        let ttl = micros * 1_000;
        (
            Just(limit),
            Just(ttl),
            proptest::collection::vec(op(limit, ttl), 1..80),
        )
    })
}

/// A permit made in a trace: its key, the model's id, the limiter's, and
/// the `Permit` while it is kept (not detached, not yet released through it).
type Made<B> = (Vec<u8>, u64, PermitId, Option<Permit<B>>);

/// Runs `ops` on `limiter` (on `clock`, swept by `sweep`) and on the
/// model, comparing every answer.
async fn agree<B: Backend>(
    limiter: Arc<Limiter<B>>,
    clock: &ManualClock,
    sweep: impl Fn(&Limiter<B>),
    (limit, ttl): (u64, u64),
    ops: &[Op],
) {
    let mut model = PermitsModel::new(limit, ttl);
    let mut made: Vec<Made<B>> = Vec::new();
    let mut now = START;
    for op in ops {
        match *op {
            Op::Advance { nanos } => {
                now += nanos;
                clock.set_nanos(now);
            }
            Op::Sweep => sweep(&limiter),
            Op::Acquire { key, cost, held } => {
                let key = vec![b'k', key];
                let want = model.acquire(&key, cost, now);
                let permit = limiter.acquire_permit(&key, cost).await.unwrap();
                let got = permit.decision();
                assert_eq!(got.allowed, want.allowed, "{op:?}");
                assert_eq!((got.limit, got.remaining), (limit, want.remaining), "{op:?}");
                assert_eq!(got.reset, Duration::from_nanos(want.reset), "{op:?}");
                assert_eq!(
                    got.retry_after,
                    want.retry_after.map(Duration::from_nanos),
                    "{op:?}"
                );
                assert_eq!(permit.id().is_some(), want.permit.is_some(), "{op:?}");
                assert_eq!(permit.key(), &key[..]);
                if let (Some(id), Some(p)) = (permit.id(), want.permit) {
                    let kept = if held {
                        Some(permit)
                    } else {
                        permit.detach();
                        None
                    };
                    made.push((key, p.id, id, kept));
                }
            }
            Op::Release { n } if !made.is_empty() => {
                let at = n % made.len();
                let (key, model_id, id, kept) = &mut made[at];
                let (released, held) = model.release(key, *model_id, now);
                if let Some(permit) = kept.take() {
                    assert_eq!(
                        permit.release().await.unwrap(),
                        released,
                        "{op:?} through the permit"
                    );
                    continue;
                }
                let got = limiter.release_permit(&key[..], *id).await.unwrap();
                assert_eq!(
                    (got.decision.allowed, got.in_flight()),
                    (released, held),
                    "{op:?}"
                );
            }
            Op::Extend { n } if !made.is_empty() => {
                let at = n % made.len();
                let (key, model_id, id, kept) = &mut made[at];
                let want = model.extend(key, *model_id, now);
                let expires_in = want.map(|at| Duration::from_nanos(at - now));
                if let Some(permit) = kept {
                    assert_eq!(
                        permit.extend().await.unwrap(),
                        want.is_some(),
                        "{op:?} through the permit"
                    );
                    assert_eq!(permit.expires_in(), expires_in, "{op:?} through the permit");
                    continue;
                }
                let got = limiter.extend_permit(&key[..], *id).await.unwrap();
                assert_eq!(got.decision.allowed, want.is_some(), "{op:?}");
                assert_eq!(got.expires_in, expires_in, "{op:?}");
            }
            Op::Release { .. } | Op::Extend { .. } => {}
        }
    }
    // The permits still kept are detached, not released when dropped: the
    // model was not told.
    for permit in made.into_iter().filter_map(|(.., kept)| kept) {
        permit.detach();
    }
}

fn concurrency(limit: u64, ttl: u64) -> Policy {
    Policy::new(Strategy::Concurrency, limit, Duration::from_nanos(ttl)).unwrap()
}

/// A limiter of one unit in flight whose permits live 10 s, on `clock`.
fn one_unit_for_ten_seconds(clock: &ManualClock) -> Arc<Limiter> {
    let ttl = Duration::from_secs(10).as_nanos() as u64;
    Arc::new(
        Limiter::builder()
            .clock(clock.clone())
            .policy(concurrency(1, ttl))
            .build()
            .unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn memory_answers_as_the_model((limit, ttl, ops) in trace()) {
        let clock = ManualClock::new(Duration::from_nanos(START));
        let limiter = Limiter::builder().clock(clock.clone()).policy(concurrency(limit, ttl)).build().unwrap();
        runtime().block_on(agree(Arc::new(limiter), &clock, Limiter::sweep, (limit, ttl), &ops));
    }

    #[test]
    fn a_custom_store_answers_as_the_model((limit, ttl, ops) in trace()) {
        let clock = ManualClock::new(Duration::from_nanos(START));
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let limiter = Limiter::builder().backend(backend).policy(concurrency(limit, ttl)).build().unwrap();
        runtime().block_on(agree(Arc::new(limiter), &clock, |_| {}, (limit, ttl), &ops));
    }
}

#[tokio::test]
async fn a_dropped_permit_frees_its_units_and_a_released_one_frees_them_once() {
    let limiter = Arc::new(
        Limiter::builder()
            .policy(Policy::new(Strategy::Concurrency, 2, Duration::from_secs(30)).unwrap())
            .build()
            .unwrap(),
    );
    let first = limiter.acquire_permit("k", 1).await.unwrap();
    let second = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(first.decision().allowed && second.decision().allowed);
    let third = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(!third.decision().allowed);
    assert_eq!(third.id(), None, "a denial holds nothing");
    drop(first);
    let id = second.id().unwrap();
    assert!(second.release().await.unwrap());
    assert!(!limiter.release_permit("k", id).await.unwrap().decision.allowed);
    let peek = limiter.acquire_permit("k", 0).await.unwrap();
    assert_eq!((peek.decision().remaining, peek.id()), (2, None));
}

#[tokio::test]
async fn a_permit_lives_past_its_ttl_only_when_extended() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let limiter = one_unit_for_ten_seconds(&clock);
    let mut kept = limiter.acquire_permit("k", 1).await.unwrap();
    clock.advance(Duration::from_secs(9));
    assert!(kept.extend().await.unwrap());
    assert_eq!(kept.expires_in(), Some(Duration::from_secs(10)));
    clock.advance(Duration::from_secs(9));
    assert!(!limiter.acquire_permit("k", 1).await.unwrap().decision().allowed);
    clock.advance(Duration::from_secs(1));
    assert!(!kept.extend().await.unwrap(), "expired at 19 s: lost");
    assert_eq!(kept.id(), None);
    assert!(limiter.acquire_permit("k", 1).await.unwrap().decision().allowed);
}

/// In memory a held permit keeps its key's entry: a reset, or a sweep once
/// its permits have expired, takes the entry out of the map, and what the
/// permit held there is gone as it is for a permit released by identifier.
#[tokio::test]
async fn a_reset_or_a_sweep_leaves_a_held_permit_nothing_to_release() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let limiter = one_unit_for_ten_seconds(&clock);
    let reset = limiter.acquire_permit("k", 1).await.unwrap();
    limiter.operate("k", Operation::Reset).await.unwrap();
    let after = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(after.decision().allowed, "the reset freed the unit");
    assert!(!reset.release().await.unwrap(), "freed by the reset");
    assert!(!limiter.acquire_permit("k", 1).await.unwrap().decision().allowed);
    drop(after);

    let mut swept = limiter.acquire_permit("k", 1).await.unwrap();
    clock.advance(Duration::from_secs(10));
    limiter.sweep();
    assert_eq!(limiter.stored_keys(), 0, "expired, swept");
    let held = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(held.decision().allowed);
    assert!(!swept.extend().await.unwrap(), "expired");
    assert_eq!(
        limiter.acquire_permit("k", 0).await.unwrap().decision().remaining,
        0
    );
    assert!(held.release().await.unwrap());
}

#[tokio::test]
async fn lists_shadow_mode_and_failing_open_hold_nothing() {
    let policy = Policy::new(Strategy::Concurrency, 1, Duration::from_secs(30)).unwrap();
    let limiter = Arc::new(
        Limiter::builder()
            .policy(policy)
            .exempt(KeyList::parse("exempt", ["vip"]).unwrap())
            .shadow(true)
            .build()
            .unwrap(),
    );
    let vip = limiter.acquire_permit("vip", 1).await.unwrap();
    assert!(vip.decision().allowed && vip.id().is_none());
    let held = limiter.acquire_permit("k", 1).await.unwrap();
    let over = limiter.acquire_permit("k", 1).await.unwrap();
    assert!(held.id().is_some());
    assert!(over.decision().allowed && over.decision().shadow_denied && over.id().is_none());

    let store = tollgate::testing::FlakyStore::new(MapStore::default());
    store.set_failing(true);
    let open = Arc::new(
        Limiter::builder()
            .backend(StoreBackend::new(store))
            .policy(policy)
            .fail_policy(FailPolicy::Open)
            .build()
            .unwrap(),
    );
    let permit = open.acquire_permit("k", 1).await.unwrap();
    assert!(permit.decision().allowed && permit.decision().fail_open && permit.id().is_none());
}

#[tokio::test]
async fn a_rate_limit_has_no_permits_and_a_concurrency_limit_no_deny_cache() {
    let rate = Arc::new(
        Limiter::builder()
            .limit(5)
            .window(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    let Err(Error::Config(err)) = rate.acquire_permit("k", 1).await else {
        panic!("a rate limit acquired a permit");
    };
    assert_eq!(err.field(), "strategy");
    let built = Limiter::builder()
        .policy(Policy::new(Strategy::Concurrency, 1, Duration::from_secs(30)).unwrap())
        .deny_cache(DenyCache::new())
        .build();
    let Err(Error::Config(err)) = built else {
        panic!("a concurrency limit took a deny cache");
    };
    assert_eq!(err.field(), "deny_cache");
    let Err(err) = Policy::new(Strategy::Concurrency, 1, Duration::ZERO) else {
        panic!("a zero ttl was taken");
    };
    assert_eq!(err.field(), "ttl");
}

#[test]
fn a_plain_decision_on_a_concurrency_limit_holds_nothing() {
    let limiter = Limiter::builder()
        .policy(Policy::new(Strategy::Concurrency, 2, Duration::from_secs(30)).unwrap())
        .build()
        .unwrap();
    for _ in 0..5 {
        let d = limiter.check_n("k", 2);
        assert!(d.allowed && d.remaining == 2);
    }
    assert!(!limiter.check_n("k", 3).allowed);
}
