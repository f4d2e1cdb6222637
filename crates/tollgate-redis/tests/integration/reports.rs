//! Usage reported after the fact on Redis (`charge: always`): the charge
//! entry point against the pure `charge_all` at microsecond ticks (through
//! functions and through scripts), and an AI gateway's sequence from two
//! services on one Redis, with nothing lost.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::backend::Tick;
use tollgate::clock::Clock;
use tollgate::strategy::{charge_all, decide_all, State};
use tollgate::{Charge, Decision, Limiter, Operation, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

use crate::differential::{any_compound_policy, any_policy, Harness, START};
use crate::support::limiters::connect_many;

/// (time step in ns, key index, cost, charged always)
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, u64, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![2 => 0u64..1_000_000, 2 => 0u64..500_000_000, 1 => 0u64..3_000_000_000],
            0usize..3,
            // Now and then a million tokens: a debt of years, within the
            // 2^52 µs where Lua's arithmetic saturates (2112).
            prop_oneof![4 => 0u64..20, 1 => Just(1u64 << 20)],
            prop::bool::weighted(0.6),
        ),
        1..60,
    )
}

/// Random traces of reports and ordinary requests on Redis, each decision
/// checked against `charge_all` or `decide_all` in microseconds.
fn reports_match_the_pure_charge(
    h: &Harness,
    policies: impl proptest::strategy::Strategy<Value = Policy>,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&(policies, trace()), |(policy, trace)| {
            h.clock.set_nanos(START + 123_456_789);
            let limiter = h.limiter(policy);
            let limits = policy.limit_rates(Tick::Micros);
            let n = limits.len();
            let mut states = [[None::<State>; Policy::MAX_LIMITS]; 3];
            for (i, &(dt, key, cost, charged)) in trace.iter().enumerate() {
                h.clock.set_nanos(h.clock.now_nanos() + dt);
                let now = h.clock.now_nanos() / 1_000;
                let mut next = [None; Policy::MAX_LIMITS];
                let compound = if charged {
                    charge_all(&limits, &states[key][..n], &mut next[..n], now, cost)
                } else {
                    decide_all(&limits, &states[key][..n], &mut next[..n], now, cost)
                };
                states[key] = next;
                let expected = Decision::from_compound(compound, &limits, Tick::Micros);
                let key = format!("tenant-{key}");
                let got =
                    h.rt.block_on(async {
                        if charged {
                            limiter.charge(&key, cost).await
                        } else {
                            limiter.allow_n(&key, cost).await
                        }
                    })
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    expected,
                    "step {} (cost {}, charged {}) of {}",
                    i,
                    cost,
                    charged,
                    policy
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn redis_reports_are_the_pure_charge() {
    let h = Harness::new();
    reports_match_the_pure_charge(&h, any_policy(), 128);
    reports_match_the_pure_charge(&h, any_compound_policy(), 64);
}

#[test]
fn redis_reports_run_as_scripts_are_the_pure_charge() {
    let h = Harness::with_scripts();
    reports_match_the_pure_charge(&h, any_policy(), 48);
    reports_match_the_pure_charge(&h, any_compound_policy(), 32);
    assert!(!h.backend().uses_functions(), "the backend fell back to scripts");
}

#[test]
fn a_report_beyond_what_lua_computes_exactly_is_refused() {
    let h = Harness::new();
    let limiter = h.limiter(Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap());
    let err = h.rt.block_on(limiter.charge("k", (1 << 51) + 1)).unwrap_err();
    assert!(err.to_string().contains("2^51"), "{err}");
    let peek = h.rt.block_on(limiter.allow_n("k", 0)).unwrap();
    assert_eq!(peek.remaining, 3, "nothing was charged");
}

/// A fixed window of 50 years: its buckets are aligned to the epoch, with
/// boundaries in 2020 and 2070, so nothing rolls over during the test.
const WINDOW: Duration = Duration::from_secs(50 * 365 * 24 * 3600);

fn until_the_window_ends() -> Duration {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let window = WINDOW.as_nanos();
    Duration::from_nanos(((now / window + 1) * window - now) as u64)
}

/// An AI gateway's exact sequence, for 1,000 tenants at once from two
/// services sharing one Redis: before each request a check of 0, after it
/// a report of the tokens it used. Each tenant's usage is exactly the sum
/// of its reports from both services; once its budget is spent its next
/// check is denied until the window ends; and both services then read the
/// same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_services_lose_no_report_across_1000_tenants() {
    const TENANTS: usize = 1_000;
    const REPORTS: usize = 50; // from each service: 100 per tenant
    const BUDGET: u64 = 10_000;
    let server = RedisServer::start();
    let backends = connect_many(RedisBackend::builder(), &server.url(), 2).await;
    let policy = Policy::new(Strategy::FixedWindow, BUDGET, WINDOW).unwrap();
    let services: Vec<Arc<Limiter<RedisBackend>>> = backends
        .iter()
        .map(|backend| {
            Arc::new(
                Limiter::builder()
                    .backend(backend.clone())
                    .policy(policy)
                    .resource("tokens")
                    .charge(Charge::Always)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let tokens = |tenant: usize, service: usize, i: usize| {
        ((tenant * 7_919 + service * 31 + i * 104_729) % 251) as u64
    };
    let mut tasks = Vec::new();
    for (s, service) in services.iter().enumerate() {
        // 32 tasks per service, each a share of the tenants.
        for task in 0..32 {
            let service = service.clone();
            tasks.push(tokio::spawn(async move {
                for tenant in (task..TENANTS).step_by(32) {
                    let key = format!("tenant-{tenant}");
                    for i in 0..REPORTS {
                        let before = until_the_window_ends();
                        let check = service.allow_n(&key, 0).await.unwrap();
                        if !check.allowed {
                            let retry = check.retry_after.expect("a spent budget says when it returns");
                            assert!(retry <= before, "{key}: {retry:?} after {before:?}");
                            assert!(
                                before - retry < Duration::from_secs(5),
                                "{key}: {retry:?}, {before:?}"
                            );
                        }
                        service.allow_n(&key, tokens(tenant, s, i)).await.unwrap();
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for tenant in 0..TENANTS {
        let key = format!("tenant-{tenant}");
        let total: u64 = (0..2)
            .flat_map(|s| (0..REPORTS).map(move |i| tokens(tenant, s, i)))
            .sum();
        assert!(total > BUDGET, "the test spends every budget");
        // Both services read the same state.
        let (a, b) = (
            services[0].allow_n(&key, 0).await.unwrap(),
            services[1].allow_n(&key, 0).await.unwrap(),
        );
        assert!(!a.allowed && a.remaining == 0, "{key}");
        assert_eq!((a.allowed, a.remaining), (b.allowed, b.remaining), "{key}");
        // The usage is exactly the total: a refund to the budget leaves no
        // unit; one unit more leaves one.
        services[0]
            .operate(&key, Operation::Refund(total - BUDGET))
            .await
            .unwrap();
        assert!(
            !services[1].allow_n(&key, 0).await.unwrap().allowed,
            "{key}: more than {total}"
        );
        services[1].operate(&key, Operation::Refund(1)).await.unwrap();
        let one = services[0].allow_n(&key, 0).await.unwrap();
        assert!(one.allowed && one.remaining == 1, "{key}: fewer than {total}");
    }
}
