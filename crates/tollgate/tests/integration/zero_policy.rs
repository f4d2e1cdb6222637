//! `Policy::zero`: a policy that admits nothing, decided by the limiter
//! itself before any store, the same on every backend and every path.

use std::time::Duration;

use tollgate::backend::store::StoreBackend;
use tollgate::clock::ManualClock;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::together::{self, Part, Role};
use tollgate::{KeyList, Limiter, Policy, Strategy};

const MINUTE: Duration = Duration::from_secs(60);

/// The clock 15 s into a minute.
fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(60 * 1_000 + 15))
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn every_request_and_peek_is_denied_until_the_window_ends() {
    let clock = clock();
    let limiter = Limiter::builder()
        .clock(clock.clone())
        .local_clock(clock.clone())
        .policy(Policy::zero(MINUTE).unwrap())
        .build()
        .unwrap();
    for cost in [0, 1, 5] {
        let d = limiter.check_n("k", cost);
        assert!(!d.allowed, "cost {cost}");
        assert_eq!((d.limit, d.remaining, d.retry_after), (0, 0, None), "cost {cost}");
        assert_eq!(d.reset, Duration::from_secs(45), "cost {cost}");
    }
    clock.advance(Duration::from_secs(50));
    assert_eq!(limiter.check("k").reset, Duration::from_secs(55));
    assert!(!limiter.check("k").allowed, "a new window admits nothing either");
    assert!(limiter.stored_keys() == 0, "no state is kept");
}

#[test]
fn the_store_is_never_asked() {
    let clock = clock();
    let store = FlakyStore::new(MapStore::with_manual_clock(&clock));
    let limiter = Limiter::builder()
        .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
        .local_clock(clock.clone())
        .policy(Policy::zero(MINUTE).unwrap())
        .build()
        .unwrap();
    assert!(!limiter.decides_now());
    store.set_failing(true);
    let d = block_on(limiter.allow("k")).unwrap();
    assert!(!d.allowed);
    assert_eq!((d.reset, d.retry_after), (Duration::from_secs(45), None));
    let reservation = block_on(limiter.reserve_n("k", 1, MINUTE)).unwrap();
    assert!(!reservation.is_reserved());
    assert_eq!(store.operations(), 0);
}

#[test]
fn lists_and_shadow_mode_apply_as_to_any_decision() {
    let clock = clock();
    let build = |shadow: bool| {
        Limiter::builder()
            .clock(clock.clone())
            .policy(Policy::zero(MINUTE).unwrap())
            .exempt(KeyList::parse("exempt", ["admin"]).unwrap())
            .shadow(shadow)
            .build()
            .unwrap()
    };
    let limiter = build(false);
    assert!(limiter.check("admin").allowed, "an exempt key is admitted");
    assert!(!limiter.check("user").allowed);
    let shadow = build(true);
    let d = shadow.check("user");
    assert!(d.allowed && d.shadow_denied, "{d:?}");
}

#[test]
fn waiting_and_reserving_give_up_at_once() {
    let clock = clock();
    let limiter = Limiter::builder()
        .clock(clock.clone())
        .policy(Policy::zero(MINUTE).unwrap())
        .build()
        .unwrap();
    block_on(async {
        let d = limiter.acquire_n_within("k", 1, None).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, None);
        let reservation = limiter
            .reserve_n("k", 1, Duration::from_secs(3_600))
            .await
            .unwrap();
        assert!(!reservation.is_reserved());
    });
}

#[test]
fn a_request_with_a_part_that_admits_nothing_charges_no_other_part() {
    let clock = clock();
    let zero = Limiter::builder()
        .clock(clock.clone())
        .policy(Policy::zero(MINUTE).unwrap())
        .build()
        .unwrap();
    let open = Limiter::builder()
        .clock(clock.clone())
        .policy(Policy::new(Strategy::FixedWindow, 5, MINUTE).unwrap())
        .build()
        .unwrap();
    let parts = [
        Part {
            limiter: &open,
            key: b"k",
            cost: 1,
            role: Role::Decisive,
        },
        Part {
            limiter: &zero,
            key: b"k",
            cost: 1,
            role: Role::Decisive,
        },
    ];
    let decided = block_on(together::allow_all(&parts)).unwrap();
    assert!(!decided.decisions[1].allowed);
    assert_eq!(open.check_n("k", 0).remaining, 5, "the other part is not charged");
}

#[test]
fn a_zero_window_is_refused_as_any_window() {
    let err = Policy::zero(Duration::ZERO).unwrap_err();
    assert_eq!(err.field(), "window");
    assert!(!Policy::new(Strategy::FixedWindow, 1, MINUTE)
        .unwrap()
        .admits_nothing());
    assert!(Policy::zero(MINUTE).unwrap().admits_nothing());
    // A limit of 0 written by mistake is still refused.
    assert!(Policy::new(Strategy::FixedWindow, 0, MINUTE).is_err());
}
