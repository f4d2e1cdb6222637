//! The contract of deciding together ([`tollgate::together`]) from the pure
//! strategy functions: what a request of several parts, each with its
//! [`Role`], must decide and leave, whatever the backend, and the driver
//! that holds a backend to it ([`requests_match_the_contract`]): the
//! core's tests check the in-memory and store-adapter backends, the Redis
//! backend's tests its one-call scripts, and the PostgreSQL backend's its
//! one-call function.

use proptest::prelude::*;
use tollgate::backend::{Backend, Tick};
use tollgate::clock::{Clock, ManualClock};
use tollgate::strategy::{decide_all, LimitRate, State};
use tollgate::together::{self, Decided, Part, Role};
use tollgate::{Decision, Limiter, Policy};

/// One part of a planned request: a policy index, a key index, a cost and
/// the part's role.
pub type PlanPart = (usize, usize, u64, Role);

/// The state of every policy's every key, one per limit.
pub type States = Vec<Vec<[Option<State>; tollgate::Policy::MAX_LIMITS]>>;

/// Random requests of one to four parts over `policies` policies and
/// `keys` keys, each with a clock step in nanoseconds (occasionally
/// backwards): costs from 0 to 4 and now and then the largest cost, a
/// part in six a quota, one in twelve in shadow mode, one in twelve a
/// quota in shadow mode.
pub fn request(policies: usize, keys: usize) -> impl Strategy<Value = (i64, Vec<PlanPart>)> {
    (
        prop_oneof![3 => 0i64..2_000_000, 2 => 0i64..2_000_000_000, 1 => -1_000i64..0],
        prop::collection::vec(
            (
                0..policies,
                0..keys,
                prop_oneof![30 => 0u64..5, 1 => Just(u64::MAX)],
                prop_oneof![
                    8 => Just(Role::Decisive),
                    2 => Just(Role::Quota),
                    1 => Just(Role::Shadow),
                    1 => Just(Role::ShadowQuota),
                ],
            ),
            1..5,
        ),
    )
}

/// Decides `requests` (from [`request`]) in turn on `limiters`, one per
/// policy of `policies`, over `keys` keys, with
/// [`allow_all`](together::allow_all) on `rt`, moving `clock` by each
/// request's step (never below `floor` nanoseconds), and checks each
/// answer against the contract at `tick`s ([`check_answer`]); then checks
/// every key's state by a charge-free decision.
///
/// # Errors
///
/// A [`TestCaseError`] naming the request, or the policy and key, that
/// differs.
pub fn requests_match_the_contract<B: Backend>(
    (rt, clock): (&tokio::runtime::Runtime, &ManualClock),
    (policies, limiters): (&[Policy], &[Limiter<B>]),
    keys: usize,
    requests: &[(i64, Vec<PlanPart>)],
    (floor, tick): (u64, Tick),
) -> Result<(), TestCaseError> {
    let limits: Vec<Vec<LimitRate>> = policies.iter().map(|p| p.limit_rates(tick)).collect();
    let mut states: States = vec![vec![[None; Policy::MAX_LIMITS]; keys]; policies.len()];
    let keys: Vec<Vec<u8>> = (0..keys).map(|k| format!("key-{k}").into_bytes()).collect();
    for (r, (dt, plan)) in requests.iter().enumerate() {
        let now = clock.now_nanos();
        clock.set_nanos(now.saturating_add_signed(*dt).max(floor));
        let parts: Vec<Part<'_, B>> = parts(plan, limiters, &keys);
        let got = rt
            .block_on(together::allow_all(&parts))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        check_answer(
            &got,
            (&limits, &mut states),
            plan,
            (tick.from_nanos(clock.now_nanos()), tick),
            &format!("request {r} {plan:?} of {policies:?}"),
        )?;
    }
    for (p, limiter) in limiters.iter().enumerate() {
        for (k, key) in keys.iter().enumerate() {
            let got = rt.block_on(limiter.allow_n(key, 0)).unwrap();
            let now = tick.from_nanos(clock.now_nanos());
            let want = alone(&limits[p], &states[p][k], now, 0, tick).0;
            prop_assert_eq!(got, want, "state of policy {} key {}", p, k);
        }
    }
    Ok(())
}

/// The parts of a planned request on `limiters` and `keys`.
pub fn parts<'a, B: Backend>(
    plan: &[PlanPart],
    limiters: &'a [Limiter<B>],
    keys: &'a [Vec<u8>],
) -> Vec<Part<'a, B>> {
    plan.iter()
        .map(|&(p, k, cost, role)| Part {
            limiter: &limiters[p],
            key: &keys[k],
            cost,
            role,
        })
        .collect()
}

/// A part decided alone for `cost` against `state` at `now` (in `tick`s):
/// its decision and next state (charged only when it admits).
pub fn alone(
    limits: &[LimitRate],
    state: &[Option<State>; tollgate::Policy::MAX_LIMITS],
    now: u64,
    cost: u64,
    tick: Tick,
) -> (Decision, [Option<State>; tollgate::Policy::MAX_LIMITS]) {
    let n = limits.len();
    let mut next = [None; tollgate::Policy::MAX_LIMITS];
    let outcome = decide_all(limits, &state[..n], &mut next[..n], now, cost);
    (Decision::from_compound(outcome, limits, tick), next)
}

/// Checks `got`, a backend's answer to the planned request `plan` at
/// `now`, against the contract ([`expected`]), moving `states` on as the
/// request leaves them: its decisions, whether it is denied, and no charge
/// left in place. `what` names the request in a failure.
///
/// # Errors
///
/// A [`TestCaseError`] saying what differs.
pub fn check_answer(
    got: &Decided,
    (limits, states): (&[Vec<LimitRate>], &mut States),
    plan: &[PlanPart],
    (now, tick): (u64, Tick),
    what: &str,
) -> Result<(), TestCaseError> {
    let (want, denied) = expected(limits, states, plan, now, tick);
    prop_assert_eq!(&got.decisions, &want, "{}", what);
    prop_assert_eq!(got.denied, denied, "{}", what);
    prop_assert_eq!(got.partial_charges, 0, "{}", what);
    Ok(())
}

/// The decisions of `parts` at `now` under the contract, whether the
/// request is denied, and `states` as the request leaves them: the parts
/// in order, each against the charges of the earlier ones; at the first
/// decisive denial nothing is charged, that part reports its denial and
/// every other part what a request of it alone gets against the stored
/// state (a charge-free decision when that admits). When every quota part
/// is denied and none is in shadow mode, the request is denied and each
/// part that was charged is given back its cost and reports it unspent.
/// A part in shadow mode reports a denial as an admission, marked
/// `shadow_denied`.
pub fn expected(
    limits: &[Vec<LimitRate>],
    states: &mut States,
    parts: &[PlanPart],
    now: u64,
    tick: Tick,
) -> (Vec<Decision>, bool) {
    let before = states.clone();
    let (mut decisions, denied) = match charged_in_order(limits, states, parts, now, tick) {
        Ok(decisions) if quotas_spent(parts, &decisions) => {
            *states = before;
            (give_back(limits, states, parts, decisions, now, tick), true)
        }
        Ok(decisions) => (decisions, false),
        Err(decisions) => (decisions, true),
    };
    for (&(_, _, _, role), decision) in parts.iter().zip(&mut decisions) {
        if matches!(role, Role::Shadow | Role::ShadowQuota) && !decision.allowed {
            decision.allowed = true;
            decision.shadow_denied = true;
        }
    }
    (decisions, denied)
}

/// Whether the request has quota parts, none in shadow mode, each denied.
fn quotas_spent(parts: &[PlanPart], decisions: &[Decision]) -> bool {
    let mut quotas = parts
        .iter()
        .zip(decisions)
        .filter(|(part, _)| matches!(part.3, Role::Quota | Role::ShadowQuota))
        .peekable();
    quotas.peek().is_some() && quotas.all(|(part, d)| part.3 == Role::Quota && !d.allowed)
}

/// `decisions` of a request whose every quota is spent: each part that was
/// charged reports its cost unspent, and every state (`states`, as they
/// were before the request) is brought forward to `now`.
fn give_back(
    limits: &[Vec<LimitRate>],
    states: &mut States,
    parts: &[PlanPart],
    decisions: Vec<Decision>,
    now: u64,
    tick: Tick,
) -> Vec<Decision> {
    let given_back = parts
        .iter()
        .zip(decisions)
        .map(|(&(_, _, cost, _), mut d)| {
            if d.allowed && cost > 0 {
                d.remaining = d.remaining.saturating_add(cost);
            }
            d
        })
        .collect();
    brought_forward(limits, states, parts, now, tick);
    given_back
}

/// Every state `parts` name, as a charge-free decision at `now` leaves it
/// (a window rolls, as the store's does).
fn brought_forward(limits: &[Vec<LimitRate>], states: &mut States, parts: &[PlanPart], now: u64, tick: Tick) {
    let mut current = states.clone();
    for &(p, k, _, _) in parts {
        let (_, next) = alone(&limits[p], &states[p][k], now, 0, tick);
        current[p][k] = next;
    }
    for &(p, k, _, _) in parts {
        states[p][k] = current[p][k];
    }
}

/// The parts decided in order, each against the charges of the earlier
/// ones, `states` charged (`Ok`); or, at the first decisive denial, every
/// part's report of a denied request (`Err`), nothing charged.
fn charged_in_order(
    limits: &[Vec<LimitRate>],
    states: &mut States,
    parts: &[PlanPart],
    now: u64,
    tick: Tick,
) -> Result<Vec<Decision>, Vec<Decision>> {
    let mut current = states.clone();
    let mut decisions = Vec::new();
    let mut denial = None;
    for (i, &(p, k, cost, role)) in parts.iter().enumerate() {
        let (decision, next) = alone(&limits[p], &current[p][k], now, cost, tick);
        current[p][k] = next;
        let denied = !decision.allowed;
        decisions.push(decision);
        if denied && role == Role::Decisive {
            denial = Some(i);
            break;
        }
    }
    let Some(denial) = denial else {
        *states = current;
        return Ok(decisions);
    };
    let mut all = Vec::new();
    for (i, &(p, k, cost, _)) in parts.iter().enumerate() {
        if i == denial {
            all.push(decisions[denial]);
            continue;
        }
        let (decision, _) = alone(&limits[p], &states[p][k], now, cost, tick);
        all.push(if decision.allowed && cost > 0 {
            alone(&limits[p], &states[p][k], now, 0, tick).0
        } else {
            decision
        });
    }
    brought_forward(limits, states, parts, now, tick);
    Err(all)
}
