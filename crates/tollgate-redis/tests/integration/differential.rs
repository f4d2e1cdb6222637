//! Differential tests: on random traces, the Lua scripts make exactly the
//! decisions of tollgate's pure strategy functions at microsecond ticks
//! (`decide` for one limit, `decide_all` for compound policies), and exactly
//! those of the in-memory backend where nanosecond and microsecond ticks
//! agree.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::backend::Tick;
use tollgate::clock::Clock;
use tollgate::clock::ManualClock;
use tollgate::strategy::{decide, decide_all, LimitRate, State};
use tollgate::{Decision, Limit, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

/// 2023-11-14, in nanoseconds since the epoch.
pub(crate) const START: u64 = 1_700_000_000_000_000_000;

/// One step of a trace: a clock change in nanoseconds (occasionally
/// backwards), a key index and a cost (peeks and costs above the limit
/// included, since limits go down to 1, and now and then the largest cost
/// there is).
fn trace(max_step_ns: u64) -> impl proptest::strategy::Strategy<Value = Vec<(i64, usize, u64)>> {
    let small = (max_step_ns / 1_000).max(1) as i64;
    let large = max_step_ns as i64;
    prop::collection::vec(
        (
            prop_oneof![
                3 => 0i64..small,
                3 => 0i64..large,
                1 => 0i64..large * 4,
                1 => -small..0,
            ],
            0usize..4,
            prop_oneof![30 => 0u64..7, 1 => Just(u64::MAX)],
        ),
        1..80,
    )
}

/// Any strategy, a limit of 1 to 8 and a window of 1µs to 2s with a
/// sub-microsecond part (which microsecond ticks truncate).
pub(crate) fn any_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    (
        0usize..4,
        1u64..9,
        prop_oneof![1u64..5_000, 1_000u64..2_000_000_000],
    )
        .prop_map(|(s, limit, window_ns)| {
            let window = Duration::from_nanos(window_ns.max(1_000));
            Policy::new(Strategy::ALL[s], limit, window).expect("valid policy")
        })
}

/// Policies whose window in microseconds is a multiple of the limit, so the
/// emission interval is exact in both nanoseconds and microseconds.
fn divisible_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    divisible_limit().prop_map(Policy::from)
}

fn divisible_limit() -> impl proptest::strategy::Strategy<Value = Limit> {
    (0usize..4, 1u64..9, prop_oneof![1u64..20, 1u64..300_000]).prop_map(|(s, limit, interval_us)| {
        Limit::new(
            Strategy::ALL[s],
            limit,
            Duration::from_micros(limit * interval_us),
        )
        .expect("valid limit")
    })
}

/// A compound policy of two to four of `limits`, those that repeat a
/// strategy and window dropped (if only one is left, a limit of 1 on the
/// same window with another strategy joins it).
fn compound_of(
    limits: impl proptest::strategy::Strategy<Value = Limit>,
) -> impl proptest::strategy::Strategy<Value = Policy> {
    prop::collection::vec(limits, 2..5).prop_map(|mut unique| {
        let mut seen = HashSet::new();
        unique.retain(|l| seen.insert((l.strategy(), l.window())));
        if unique.len() == 1 {
            let strategy = match unique[0].strategy() {
                Strategy::FixedWindow => Strategy::TokenBucket,
                _ => Strategy::FixedWindow,
            };
            unique.push(Limit::new(strategy, 1, unique[0].window()).expect("valid limit"));
        }
        Policy::compound(unique).expect("valid compound policy")
    })
}

/// Compound policies of limits like those of [`any_policy`].
pub(crate) fn any_compound_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    compound_of(any_policy().prop_map(|p| p.limits()[0]))
}

pub(crate) struct Harness {
    server: RedisServer,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) clock: ManualClock,
    pub(crate) backend: RedisBackend,
    url: String,
    case: AtomicU64,
}

impl Harness {
    pub(crate) fn new() -> Self {
        Self::connect(false)
    }

    /// A harness whose backend runs scripts (`EVALSHA`): its user is
    /// refused functions.
    pub(crate) fn with_scripts() -> Self {
        Self::connect(true)
    }

    fn connect(scripts: bool) -> Self {
        let server = RedisServer::start();
        let url = if scripts {
            server.url_without_functions()
        } else {
            server.url()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let clock = ManualClock::default();
        // The manual clock runs far ahead of real time and stands still in
        // between, so keep expired keys for the whole run: the scripts must
        // treat expired state as absent by themselves.
        let backend = rt
            .block_on(
                RedisBackend::builder()
                    .caller_clock(clock.clone())
                    .expiry_grace(Duration::from_secs(3_600))
                    .connect(&url),
            )
            .unwrap();
        Self {
            server,
            rt,
            clock,
            backend,
            url,
            case: AtomicU64::new(0),
        }
    }

    /// The rate-limit calls the harness's Redis has run so far.
    pub(crate) fn script_calls(&self) -> u64 {
        self.server.script_calls()
    }

    /// The backend, on the harness's clock.
    pub(crate) fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// The server's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// A limiter on a fresh namespace, so cases never see each other's state.
    pub(crate) fn limiter(&self, policy: Policy) -> Limiter<RedisBackend> {
        let case = self.case.fetch_add(1, Ordering::Relaxed);
        Limiter::builder()
            .backend(self.backend.clone())
            .policy(policy)
            .key_prefix(format!("case{case}"))
            .build()
            .unwrap()
    }

    /// Decides `cost` for key number `key` on Redis at the clock's time and
    /// checks the answer against the pure functions at the same
    /// microsecond: the strategy function `decide` for one limit,
    /// `decide_all` for several. They decide from `states[key]` (one state
    /// per limit), which is updated in place.
    fn agrees_with_the_pure_functions(
        &self,
        limiter: &Limiter<RedisBackend>,
        states: &mut [[Option<State>; tollgate::Policy::MAX_LIMITS]],
        key: usize,
        cost: u64,
        request: usize,
    ) -> Result<(), TestCaseError> {
        let limits: Vec<LimitRate> = limiter
            .policy()
            .limits()
            .iter()
            .map(|l| LimitRate {
                strategy: l.strategy(),
                rate: l.rate_micros(),
            })
            .collect();
        let now = self.clock.now_nanos() / 1_000;
        let expected = match &limits[..] {
            [one] => {
                let (outcome, next) = decide(one.strategy, &one.rate, states[key][0], now, cost);
                states[key][0] = next;
                Decision::from_outcome(outcome, one.rate.limit, Tick::Micros)
            }
            _ => {
                let n = limits.len();
                let mut next = [None; tollgate::Policy::MAX_LIMITS];
                let compound = decide_all(&limits, &states[key][..n], &mut next[..n], now, cost);
                states[key] = next;
                Decision::from_compound(compound, &limits, Tick::Micros)
            }
        };
        let got = self
            .rt
            .block_on(limiter.allow_n(format!("key-{key}"), cost))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(
            got,
            expected,
            "request {} (cost {}) of {:?}",
            request,
            cost,
            limits
        );
        Ok(())
    }

    fn step(&self, dt: i64) {
        let now = self.clock.now_nanos();
        self.clock.set_nanos(now.saturating_add_signed(dt).max(START / 2));
    }
}

/// Runs `cases` random traces of `policies` on Redis (through `h`) against
/// the pure functions at microsecond ticks.
fn matches_the_pure_functions(
    h: &Harness,
    policies: impl proptest::strategy::Strategy<Value = Policy>,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&(policies, trace(3_000_000_000)), |(policy, trace)| {
            h.clock.set_nanos(START + 123_456_789);
            let limiter = h.limiter(policy);
            let mut states = [[None; tollgate::Policy::MAX_LIMITS]; 4];
            for (i, &(dt, key, cost)) in trace.iter().enumerate() {
                h.step(dt);
                h.agrees_with_the_pure_functions(&limiter, &mut states, key, cost, i)?;
            }
            Ok(())
        })
        .unwrap();
}

/// Runs `cases` random traces of `policies` (whose emission intervals are
/// whole microseconds) in whole microsecond steps on Redis and on the
/// in-memory backend.
fn matches_the_in_memory_backend(policies: impl proptest::strategy::Strategy<Value = Policy>, cases: u32) {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&(policies, trace(2_000_000_000)), |(policy, trace)| {
            h.clock.set_nanos(START);
            let limiter = h.limiter(policy);
            let memory = Limiter::builder()
                .policy(policy)
                .clock(h.clock.clone())
                .build()
                .unwrap();
            let sliding = policy
                .limits()
                .iter()
                .any(|l| l.strategy() == Strategy::SlidingWindow);
            for (i, &(dt, key, cost)) in trace.iter().enumerate() {
                // Whole microseconds only.
                h.step(dt / 1_000 * 1_000);
                let key = format!("key-{key}");
                let mut expected = memory.check_n(&key, cost);
                let got =
                    h.rt.block_on(limiter.allow_n(&key, cost))
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                if sliding && !expected.allowed {
                    // The sliding window's retry delay is the first tick at
                    // which the estimate falls far enough; in microsecond
                    // ticks that is the nanosecond answer rounded up. With
                    // several limits the longest delay rounds up alike, but
                    // rounding can make two limits' delays equal and a tie
                    // names the first listed: the binding limit is left to
                    // the comparison with `decide_all` in microseconds.
                    expected.retry_after = expected.retry_after.map(ceil_micros);
                    expected.bound_by = got.bound_by;
                    expected.limit = policy.limits()[got.bound_by].limit();
                }
                prop_assert_eq!(got, expected, "request {} of {}", i, policy);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn scripts_match_the_strategy_functions_in_microseconds() {
    matches_the_pure_functions(&Harness::new(), any_policy(), 256);
}

#[test]
fn scripts_run_without_functions_match_the_strategy_functions() {
    let h = Harness::with_scripts();
    matches_the_pure_functions(&h, any_policy(), 96);
    matches_the_pure_functions(&h, any_compound_policy(), 64);
    assert!(!h.backend.uses_functions(), "the backend fell back to scripts");
}

#[test]
fn scripts_match_the_in_memory_backend_when_ticks_agree() {
    matches_the_in_memory_backend(divisible_policy(), 256);
}

#[test]
fn the_compound_script_matches_decide_all_in_microseconds() {
    matches_the_pure_functions(&Harness::new(), any_compound_policy(), 192);
}

#[test]
fn compound_policies_on_redis_match_the_in_memory_backend_when_ticks_agree() {
    matches_the_in_memory_backend(compound_of(divisible_limit()), 192);
}

fn ceil_micros(d: Duration) -> Duration {
    Duration::from_micros(d.as_nanos().div_ceil(1_000) as u64)
}

/// Policies at the edge of what the scripts accept: limits and windows up to
/// 2^51 (µs), sliding windows with `limit × window` up to 2^52.
fn extreme_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    (0usize..4, 0u32..52, 1u64..1_000).prop_map(|(s, limit_bits, scale)| {
        let strategy = Strategy::ALL[s];
        let limit = ((1u64 << limit_bits) + scale % (1u64 << limit_bits)).min(1 << 51);
        let max_window = match strategy {
            Strategy::SlidingWindow => (1u64 << 52) / limit,
            _ => 1 << 51,
        };
        let window = max_window
            .saturating_sub(scale * (max_window / 1_000_000).max(1))
            .clamp(1, 1 << 51);
        Policy::new(strategy, limit, Duration::from_micros(window)).expect("valid policy")
    })
}

/// Runs `cases` random traces of `policies` at the edges of the accepted
/// range on Redis against the pure functions. Each step is a time step in
/// thousandths of a window, a key, a fraction in millionths and a kind of
/// cost; step `i` sizes its time step and cost by limit `i` of the policy
/// (round robin).
fn stays_exact_at_the_edges(policies: impl proptest::strategy::Strategy<Value = Policy>, cases: u32) {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let steps = prop::collection::vec((0u64..2_500, 0usize..2, 0u64..1_000_000, 0u64..3), 1..40);
    runner
        .run(&(policies, steps), |(policy, steps)| {
            // 2023, with ~2.8e15µs of headroom below the scripts' 2^52µs.
            h.clock.set_nanos(START);
            let limiter = h.limiter(policy);
            let last_us = (1u64 << 52) - 1;
            let mut states = [[None; tollgate::Policy::MAX_LIMITS]; 2];
            for (i, &(per_mille, key, frac, kind)) in steps.iter().enumerate() {
                let rate = policy.limits()[i % policy.limits().len()].rate_micros();
                // Steps of 0 to 2.5 windows, capped below 2^52µs.
                let dt = (u128::from(rate.window) * u128::from(per_mille) / 1_000) as u64;
                let now = (h.clock.now_nanos() / 1_000).saturating_add(dt).min(last_us);
                h.clock.set_nanos(now * 1_000);
                // Costs near the limit, a few units, or above it.
                let cost = match kind {
                    0 => (u128::from(rate.limit) * u128::from(frac) / 1_000_000) as u64,
                    1 => frac % 4,
                    _ => rate.limit - frac.min(rate.limit - 1) % 3 + frac % 3,
                };
                h.agrees_with_the_pure_functions(&limiter, &mut states, key, cost, i)?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn scripts_stay_exact_at_the_edges_of_the_accepted_range() {
    stays_exact_at_the_edges(extreme_policy(), 64);
}

#[test]
fn the_compound_script_stays_exact_at_the_edges_of_the_accepted_range() {
    stays_exact_at_the_edges(compound_of(extreme_policy().prop_map(|p| p.limits()[0])), 48);
}
