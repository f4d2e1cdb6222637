//! Usage reported after the fact through a limiter (`charge: always`):
//! `Limiter::charge` and the `Charge::Always` setting, in memory and on a
//! custom store, against the pure functions (`charge_all`, `decide_all`),
//! through the deny cache, the leases, the fail policy, shadow mode, the
//! lists and requests of several parts.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::{Backend, Tick};
use tollgate::clock::{Clock, ManualClock};
use tollgate::protection::{DenyCache, Lease};
use tollgate::strategy::{charge_all, decide_all, LimitRate, State};
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::together::{self, Part, Role};
use tollgate::{Charge, Decision, Error, FailPolicy, KeyList, Limit, Limiter, Operation, Policy, Strategy};

const START: u64 = 1_700_000_000_000_000_000;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

/// What one step of a trace asks: a check before the work (cost 0), a
/// request charged only when admitted, or a report charged always.
#[derive(Clone, Copy, Debug)]
enum Ask {
    Check,
    Request(u64),
    Report(u64),
}

fn ask() -> impl proptest::strategy::Strategy<Value = Ask> {
    prop_oneof![
        1 => Just(Ask::Check),
        1 => (0u64..6).prop_map(Ask::Request),
        2 => (0u64..25).prop_map(Ask::Report),
    ]
}

/// (time step in ns, key index, what is asked)
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, Ask)>> {
    prop::collection::vec(
        (
            prop_oneof![2 => 0u64..1_000, 2 => 0u64..50_000_000, 1 => 0u64..3_000_000_000],
            0usize..3,
            ask(),
        ),
        1..120,
    )
}

fn policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    let limit = (0usize..4, 1u64..9, 1u64..2_000).prop_map(|(s, limit, window_ms)| {
        Limit::new(Strategy::ALL[s], limit, Duration::from_millis(window_ms)).expect("valid limit")
    });
    prop_oneof![
        3 => limit.clone().prop_map(Policy::from),
        1 => prop::collection::vec(limit, 2..4).prop_filter_map("distinct windows", |limits| {
            Policy::compound(limits).ok()
        }),
    ]
}

/// The pure model of a limiter: one state per key and limit.
struct Model {
    limits: Vec<LimitRate>,
    states: Vec<[Option<State>; Policy::MAX_LIMITS]>,
}

impl Model {
    fn new(policy: &Policy, keys: usize) -> Self {
        let limits = policy.limit_rates(Tick::Nanos);
        Self {
            limits,
            states: vec![[None; Policy::MAX_LIMITS]; keys],
        }
    }

    fn ask(&mut self, key: usize, now: u64, cost: u64, charged: bool) -> Decision {
        let n = self.limits.len();
        let mut next = [None; Policy::MAX_LIMITS];
        let before = &self.states[key][..n];
        let compound = if charged {
            charge_all(&self.limits, before, &mut next[..n], now, cost)
        } else {
            decide_all(&self.limits, before, &mut next[..n], now, cost)
        };
        self.states[key][..n].copy_from_slice(&next[..n]);
        Decision::from_compound(compound, &self.limits, Tick::Nanos)
    }
}

/// Runs `trace` on `limiter` (decided with `decide`) and on the model,
/// comparing every decision.
fn agrees<B: Backend>(
    limiter: &Limiter<B>,
    clock: &ManualClock,
    trace: &[(u64, usize, Ask)],
    decide: impl Fn(&Limiter<B>, &str, Ask) -> Decision,
) -> Result<(), TestCaseError> {
    let mut model = Model::new(limiter.policy(), 3);
    let mut now = START;
    for (i, &(dt, key, ask)) in trace.iter().enumerate() {
        now += dt;
        clock.set_nanos(now);
        let expected = match ask {
            Ask::Check => model.ask(key, now, 0, false),
            Ask::Request(cost) => model.ask(key, now, cost, false),
            Ask::Report(cost) => model.ask(key, now, cost, true),
        };
        let got = decide(limiter, &format!("tenant-{key}"), ask);
        prop_assert_eq!(got, expected, "step {} ({:?}) of {:?}", i, ask, limiter.policy());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// `Limiter::charge` in memory, between checks and ordinary requests,
    /// is `charge_all`; the requests are `decide_all`.
    #[test]
    fn memory_reports_are_the_pure_charge(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        let limiter = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let rt = rt();
        agrees(&limiter, &clock, &trace, |limiter, key, ask| match ask {
            Ask::Check => limiter.check_n(key, 0),
            Ask::Request(cost) => limiter.check_n(key, cost),
            Ask::Report(cost) => rt.block_on(limiter.charge(key, cost)).unwrap(),
        })?;
    }

    /// Under `Charge::Always`, every decision of cost 1 or more is a
    /// report, on the synchronous path too; cost 0 stays a peek.
    #[test]
    fn a_limiter_that_charges_always_reports_every_request(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        let limiter = Limiter::builder()
            .policy(policy)
            .clock(clock.clone())
            .charge(Charge::Always)
            .build()
            .unwrap();
        prop_assert_eq!(limiter.charges(), Charge::Always);
        let reports: Vec<_> = trace
            .iter()
            .map(|&(dt, key, ask)| (dt, key, match ask {
                Ask::Request(cost) | Ask::Report(cost) => Ask::Report(cost),
                Ask::Check => Ask::Check,
            }))
            .collect();
        agrees(&limiter, &clock, &reports, |limiter, key, ask| match ask {
            Ask::Check => limiter.check_n(key, 0),
            Ask::Request(cost) | Ask::Report(cost) => limiter.decide_now(key, cost).unwrap().unwrap(),
        })?;
    }

    /// The custom-store adapter charges as memory does.
    #[test]
    fn store_reports_are_the_pure_charge(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let limiter = Limiter::builder().policy(policy).backend(backend).build().unwrap();
        let rt = rt();
        agrees(&limiter, &clock, &trace, |limiter, key, ask| match ask {
            Ask::Check => rt.block_on(limiter.allow_n(key, 0)).unwrap(),
            Ask::Request(cost) => rt.block_on(limiter.allow_n(key, cost)).unwrap(),
            Ask::Report(cost) => rt.block_on(limiter.charge(key, cost)).unwrap(),
        })?;
    }
}

/// Proves that `key`'s usage in the current window is exactly `total`,
/// the clock standing still: after a refund of `total - limit`, a unit
/// request no longer fits; after one more unit's refund it does.
fn usage_is_exactly<B: Backend>(rt: &tokio::runtime::Runtime, limiter: &Limiter<B>, key: &str, total: u64) {
    let limit = limiter.policy().limits()[0].limit();
    assert!(total >= limit, "the proof needs a key over its limit");
    rt.block_on(limiter.operate(key, Operation::Refund(total - limit)))
        .unwrap();
    // Whether a unit fits, as enforcement says (in shadow mode too).
    let fits = |d: Decision| d.allowed && !d.shadow_denied;
    let full = rt.block_on(limiter.allow_n(key, 0)).unwrap();
    assert!(!fits(full), "{key}: more than {total} units were charged");
    rt.block_on(limiter.operate(key, Operation::Refund(1))).unwrap();
    let one_left = rt.block_on(limiter.allow_n(key, 0)).unwrap();
    assert!(
        fits(one_left) && one_left.remaining == 1,
        "{key}: fewer than {total} units were charged"
    );
}

/// The exact sequence of an AI gateway, for 1,000 tenants at once on four
/// threads: a check of 0 before each request, the request, then a report
/// of the tokens it used. No report is lost: each tenant's usage is the
/// sum of its reports, and every decision is the pure model's.
#[test]
fn an_ai_gateway_loses_no_report_across_1000_tenants() {
    const TENANTS: usize = 1_000;
    const REPORTS: usize = 100;
    const BUDGET: u64 = 8_000;
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let policy = Policy::new(Strategy::FixedWindow, BUDGET, Duration::from_secs(3_600)).unwrap();
    let limiter = Arc::new(
        Limiter::builder()
            .policy(policy)
            .clock(clock.clone())
            .charge(Charge::Always)
            .build()
            .unwrap(),
    );
    let tokens = |tenant: usize, i: usize| ((tenant * 7_919 + i * 104_729) % 251) as u64;
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let limiter = &limiter;
            let clock = &clock;
            scope.spawn(move || {
                let mut model = Model::new(limiter.policy(), 1);
                for tenant in (thread..TENANTS).step_by(4) {
                    model.states[0] = [None; Policy::MAX_LIMITS];
                    let key = format!("tenant-{tenant}");
                    let now = clock.now_nanos();
                    for i in 0..REPORTS {
                        let check = limiter.check_n(&key, 0);
                        assert_eq!(check, model.ask(0, now, 0, false), "{key} check {i}");
                        if !check.allowed {
                            // Denied once the budget is spent, until the window ends.
                            let window_end = 3_600_000_000_000 - now % 3_600_000_000_000;
                            assert_eq!(check.retry_after, Some(Duration::from_nanos(window_end)));
                        }
                        let report = limiter.check_n(&key, tokens(tenant, i));
                        assert_eq!(
                            report,
                            model.ask(0, now, tokens(tenant, i), true),
                            "{key} report {i}"
                        );
                    }
                }
            });
        }
    });
    let rt = rt();
    for tenant in 0..TENANTS {
        let total: u64 = (0..REPORTS).map(|i| tokens(tenant, i)).sum();
        usage_is_exactly(&rt, &limiter, &format!("tenant-{tenant}"), total);
    }
}

type Flaky = Arc<FlakyStore<MapStore>>;

fn on_store(clock: &ManualClock, store: &Flaky) -> tollgate::LimiterBuilder<StoreBackend<Flaky>> {
    Limiter::builder()
        .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
        .local_clock(clock.clone())
}

/// A report reaches the store past a cached denial and past the key's
/// lease, and its denial refreshes the cache: two processes sharing the
/// store count every unit reported.
#[test]
fn reports_pass_the_deny_cache_and_the_leases() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store: Flaky = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
    let policy = Policy::new(Strategy::TokenBucket, 100, Duration::from_secs(100)).unwrap();
    let protected = |charge| {
        on_store(&clock, &store)
            .policy(policy)
            .deny_cache(DenyCache::new())
            .lease(Lease::new(20, Duration::from_secs(1)))
            .charge(charge)
            .build()
            .unwrap()
    };
    let (gateway, reporter) = (protected(Charge::Admitted), protected(Charge::Always));
    let rt = rt();
    // The gateway leases units and spends them.
    for _ in 0..10 {
        assert!(rt.block_on(gateway.allow("t")).unwrap().allowed);
    }
    // Reports from both processes, beyond the budget.
    let mut total = 0;
    for cost in [30, 40, 50] {
        rt.block_on(reporter.allow_n("t", cost)).unwrap();
        rt.block_on(gateway.charge("t", cost)).unwrap();
        total += 2 * cost;
    }
    // Its lease ends (the unspent units go back); its next request is
    // denied, and the denial cached.
    rt.block_on(gateway.end_leases()).unwrap();
    assert!(!rt.block_on(gateway.allow("t")).unwrap().allowed);
    let ops = store.operations();
    assert!(!rt.block_on(gateway.allow("t")).unwrap().allowed);
    assert_eq!(store.operations(), ops, "the cached denial answered");
    // A report is not answered from the cache: it reaches the store.
    let report = rt.block_on(gateway.charge("t", 5)).unwrap();
    assert!(!report.allowed);
    assert!(store.operations() > ops, "the report reached the store");
    total += 5;
    // Leased units the gateway did not spend went back: the usage is the
    // 10 admitted requests and every report.
    let fresh = on_store(&clock, &store).policy(policy).build().unwrap();
    usage_is_exactly(&rt, &fresh, "t", 10 + total);
}

/// Shadow mode charges a report as enforcement would and admits it; an
/// exempt key is charged nothing, a denied one neither; a policy that
/// admits nothing charges nothing.
#[test]
fn shadow_mode_and_the_lists_treat_reports_as_the_contract_says() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let policy = Policy::new(Strategy::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let rt = rt();
    let shadow = Limiter::builder()
        .policy(policy)
        .clock(clock.clone())
        .shadow(true)
        .build()
        .unwrap();
    let over = rt.block_on(shadow.charge("k", 25)).unwrap();
    assert!(over.allowed && over.shadow_denied && over.remaining == 0);
    let peek = shadow.check_n("k", 0);
    assert!(peek.shadow_denied, "the report was charged in shadow mode");
    usage_is_exactly(&rt, &shadow, "k", 25);

    let listed = Limiter::builder()
        .policy(policy)
        .clock(clock.clone())
        .exempt(KeyList::parse("exempt", ["vip"]).unwrap())
        .deny(KeyList::parse("deny", ["banned"]).unwrap())
        .charge(Charge::Always)
        .build()
        .unwrap();
    assert!(listed.check_n("vip", 1_000).allowed);
    assert!(!listed.check_n("banned", 1_000).allowed);
    let other = Limiter::builder()
        .policy(policy)
        .clock(clock.clone())
        .build()
        .unwrap();
    // The exempt and denied keys kept no state: the backend holds none.
    assert_eq!(listed.stored_keys(), 0);
    assert!(other.check_n("vip", 10).allowed);

    let zero = Limiter::builder()
        .policy(Policy::zero(Duration::from_secs(60)).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(!rt.block_on(zero.charge("k", 3)).unwrap().allowed);
    assert_eq!(zero.stored_keys(), 0);
}

/// A report whose store fails is not charged there: fail closed returns
/// the error, the fallback charges the report in memory instead.
#[test]
fn a_failed_report_is_charged_by_the_fallback_and_never_twice() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store: Flaky = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
    let policy = Policy::new(Strategy::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let rt = rt();
    let closed = on_store(&clock, &store).policy(policy).build().unwrap();
    let fallback = on_store(&clock, &store)
        .policy(policy)
        .fallback(policy)
        .build()
        .unwrap();
    assert_eq!(fallback.fail_policy(), FailPolicy::Fallback);
    store.set_failing(true);
    assert!(matches!(
        rt.block_on(closed.charge("k", 4)),
        Err(Error::Backend(_))
    ));
    let first = rt.block_on(fallback.charge("k", 8)).unwrap();
    assert!(first.fallback && first.allowed && first.remaining == 2);
    let second = rt.block_on(fallback.charge("k", 8)).unwrap();
    assert!(
        second.fallback && !second.allowed,
        "the fallback charged the first report"
    );
    store.set_failing(false);
    // The store was charged by neither.
    assert_eq!(rt.block_on(closed.allow_n("k", 0)).unwrap().remaining, 10);
}

/// Requests of several parts: a part charged always is charged whatever
/// the other parts decide; when it denies, the others are charged nothing.
#[test]
fn a_part_charged_always_is_charged_whatever_the_request_decides() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let rt = rt();
    let limiter = |limit, charge| {
        Limiter::builder()
            .policy(Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(60)).unwrap())
            .clock(clock.clone())
            .charge(charge)
            .build()
            .unwrap()
    };
    let (tokens, requests) = (limiter(100, Charge::Always), limiter(2, Charge::Admitted));
    let parts = |cost| {
        [
            Part {
                limiter: &tokens,
                key: b"t".as_slice(),
                cost,
                role: Role::Decisive,
            },
            Part {
                limiter: &requests,
                key: b"t".as_slice(),
                cost: 1,
                role: Role::Decisive,
            },
        ]
    };
    for _ in 0..2 {
        let decided = rt.block_on(together::allow_all(&parts(10))).unwrap();
        assert!(decided.decisions.iter().all(|d| d.allowed));
    }
    // The request limit denies: the token part is charged all the same.
    let decided = rt.block_on(together::allow_all(&parts(10))).unwrap();
    assert!(decided.decisions[0].allowed && !decided.decisions[1].allowed);
    assert_eq!(tokens.check_n("t", 0).remaining, 70);
    rt.block_on(requests.operate("t", Operation::Reset)).unwrap();
    // The token part denies (more than is left): the request part is
    // charged nothing, the tokens are.
    let decided = rt.block_on(together::allow_all(&parts(90))).unwrap();
    assert!(!decided.decisions[0].allowed);
    assert_eq!(decided.decisions[1].remaining, 2);
    assert_eq!(requests.check_n("t", 0).remaining, 2);
    usage_is_exactly(&rt, &tokens, "t", 120);
    // A request that a part admitting nothing denies is reported, and
    // the part charged always is charged then too.
    rt.block_on(requests.operate("t", Operation::Reset)).unwrap();
    let zero = Limiter::builder()
        .policy(tollgate::Policy::zero(Duration::from_secs(60)).unwrap())
        .build()
        .unwrap();
    let [tokens_part, requests_part] = parts(1);
    let blocked = [
        tokens_part,
        requests_part,
        Part {
            limiter: &zero,
            key: b"t".as_slice(),
            cost: 1,
            role: Role::Decisive,
        },
    ];
    let reported = rt.block_on(together::allow_all(&blocked)).unwrap();
    assert!(reported.denied);
    assert_eq!(reported.decisions.len(), 3);
    assert_eq!(requests.check_n("t", 0).remaining, 2);
    assert!(!tokens.check_n("t", 0).allowed);
}

#[test]
fn a_report_above_the_largest_cost_is_refused() {
    let limiter = Limiter::builder()
        .policy(Policy::new(Strategy::TokenBucket, 10, Duration::from_secs(1)).unwrap())
        .build()
        .unwrap();
    let err = rt()
        .block_on(limiter.charge("k", Policy::MAX_LIMIT + 1))
        .unwrap_err();
    assert!(err.to_string().contains("cost"), "{err}");
    assert!(limiter.check_n("k", 0).remaining == 10, "nothing was charged");
}
