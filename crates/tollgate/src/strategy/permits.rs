//! The concurrency limit as pure functions: a key's permits and the three
//! operations on them ([requests in
//! flight](crate::_documentation::semantics#requests-in-flight)).
//!
//! A key's state is a `PermitSet`: the latest time an operation on it
//! used and its permits, each an identifier, a cost and an expiry. The
//! operations (`acquire`, `release`, `extend`, `peek`: a [`PermitOp`])
//! take the set, the limit `L`, the `ttl` and `now` in ticks, change the
//! set and answer a [`PermitOutcome`]; no I/O, no clock. They are the
//! crate's own: the public API is the operation, its identifier and its
//! answer, what a store is asked and answers. The in-memory table, the store
//! adapter and the Redis script run these same steps. Expired permits are
//! absent: every operation drops them first, and a set with no permit left
//! is the absent state.
//!
//! With `L` at most [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT) and
//! every cost at most `L`, the units held never exceed `L`, so every sum
//! fits; an expiry past [`MAX_TICK`] is kept at it.

use super::{clamp_time, MAX_TICK};

/// A permit's identifier: unique within its key, never reused. A limiter
/// makes them from a random number drawn once per process and a count, so
/// that processes sharing a store never make the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(pub u128);

impl std::fmt::Display for PermitId {
    /// 32 lowercase hexadecimal digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::str::FromStr for PermitId {
    type Err = std::num::ParseIntError;

    /// Reads the 32 hexadecimal digits [`Display`](std::fmt::Display) writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u128::from_str_radix(s, 16).map(PermitId)
    }
}

/// One permit held by a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    /// The permit's identifier.
    pub id: PermitId,
    /// The units it holds, `1 <= cost <= L`.
    pub cost: u64,
    /// The tick at and after which it is expired.
    pub expires: u64,
}

/// The permits of one key, and the latest tick an operation on it used
/// (an operation never uses an earlier one, so a key's time never goes
/// back).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PermitSet {
    /// The latest tick an operation used.
    pub seen: u64,
    /// The unexpired permits as of `seen`, in the order they were made.
    pub permits: Vec<Held>,
}

/// What an operation on a key's permits answers, in ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PermitOutcome {
    /// For an acquire, whether the units are held (for a peek, whether a
    /// unit fits); for a release, whether it freed the permit's units; for
    /// an extend, whether the permit lives on.
    pub done: bool,
    /// The units the key's unexpired permits hold after the operation.
    pub in_flight: u64,
    /// Ticks until the last unexpired permit expires (zero with none).
    pub reset: u64,
    /// For a denied acquire, the ticks until enough permits expire for its
    /// cost to fit were nothing released or acquired meanwhile; `None`
    /// otherwise, and when the cost exceeds `L`.
    pub retry_after: Option<u64>,
    /// The ticks from the operation's time until the acquired or extended
    /// permit expires.
    pub expires_in: Option<u64>,
}

impl PermitSet {
    /// The time an operation at `now` uses, recorded, with the permits
    /// expired by then dropped: never earlier than one before while the key
    /// holds a permit; a set that holds none is the absent state, its time
    /// forgotten (so an empty set kept in memory answers as an absent one).
    fn at(&mut self, now: u64) -> u64 {
        let now = clamp_time(now);
        let latest = self.seen.max(now);
        if self.permits.iter().any(|p| p.expires <= latest) {
            self.permits.retain(|p| p.expires > latest);
        }
        self.seen = if self.permits.is_empty() { now } else { latest };
        self.seen
    }

    /// The units the permits hold.
    pub(crate) fn held(&self) -> u64 {
        self.permits.iter().map(|p| p.cost).sum()
    }

    /// Whether the set is the absent state: no permit held.
    pub(crate) fn is_empty(&self) -> bool {
        self.permits.is_empty()
    }

    /// The tick from which the set is absent: its last permit's expiry.
    pub(crate) fn expires_at(&self) -> u64 {
        self.permits.iter().map(|p| p.expires).max().unwrap_or(0)
    }

    /// The answer after an operation at `now`.
    fn outcome(&self, now: u64, done: bool) -> PermitOutcome {
        // The units held and the last expiry, in one pass.
        let (held, last) = self
            .permits
            .iter()
            .fold((0, 0), |(held, last), p| (held + p.cost, last.max(p.expires)));
        PermitOutcome {
            done,
            in_flight: held,
            reset: last.saturating_sub(now),
            retry_after: None,
            expires_in: None,
        }
    }

    /// The ticks until `cost` units fit under `limit` by expiries alone.
    fn wait_for(&self, cost: u64, limit: u64, now: u64) -> u64 {
        let mut expiries: Vec<(u64, u64)> = self.permits.iter().map(|p| (p.expires, p.cost)).collect();
        expiries.sort_unstable();
        let mut held = self.held();
        for (expires, units) in expiries {
            held -= units;
            if held + cost <= limit {
                return expires - now;
            }
        }
        0
    }
}

/// `acquire(key, cost)` at `now` under limit `limit` with permits lasting
/// `ttl` ticks: admitted if and only if the units held plus `cost` fit in
/// `limit` (a `cost` of zero is a peek: whether one unit fits, holding
/// nothing); admitted with a cost of at least one, a permit `id` of `cost`
/// units expiring at `now + ttl`. An `id` the key already holds unexpired
/// is the same acquisition asked again (a retry after a lost reply): it is
/// admitted again, holding nothing more, its expiry unchanged.
pub(crate) fn acquire(
    set: &mut PermitSet,
    limit: u64,
    ttl: u64,
    now: u64,
    id: PermitId,
    cost: u64,
) -> PermitOutcome {
    let now = set.at(now);
    if let Some(known) = set.permits.iter().find(|p| p.id == id) {
        let expires_in = known.expires - now;
        return PermitOutcome {
            expires_in: Some(expires_in),
            ..set.outcome(now, true)
        };
    }
    let asked = cost.max(1);
    let fits = asked <= limit && set.held() + asked <= limit;
    let mut expires_in = None;
    if fits && cost > 0 {
        let at = now.saturating_add(ttl).min(MAX_TICK);
        set.permits.push(Held {
            id,
            cost,
            expires: at,
        });
        expires_in = Some(at - now);
    }
    PermitOutcome {
        retry_after: (!fits && asked <= limit).then(|| set.wait_for(asked, limit, now)),
        expires_in,
        ..set.outcome(now, fits)
    }
}

/// `release(key, permit)` at `now`: an unexpired permit `id` is removed
/// and its units are free (`done`); an expired, released or unknown one
/// changes nothing.
pub(crate) fn release(set: &mut PermitSet, now: u64, id: PermitId) -> PermitOutcome {
    let now = set.at(now);
    let at = set.permits.iter().position(|p| p.id == id);
    if let Some(at) = at {
        set.permits.remove(at);
    }
    set.outcome(now, at.is_some())
}

/// `extend(key, permit)` at `now`: an unexpired permit `id` now expires
/// at `now + ttl` (`done`, and its new expiry); an expired, released or
/// unknown one is not brought back.
pub(crate) fn extend(set: &mut PermitSet, ttl: u64, now: u64, id: PermitId) -> PermitOutcome {
    let now = set.at(now);
    let at = now.saturating_add(ttl).min(MAX_TICK);
    let permit = set.permits.iter_mut().find(|p| p.id == id);
    let expires_in = permit.map(|p| {
        p.expires = at;
        at - now
    });
    PermitOutcome {
        expires_in,
        ..set.outcome(now, expires_in.is_some())
    }
}

/// One operation on a key's permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermitOp {
    /// Acquire a permit `id` of `cost` units (`cost = 0` peeks: whether a
    /// unit fits, holding nothing).
    Acquire {
        /// The new permit's identifier.
        id: PermitId,
        /// The units it holds.
        cost: u64,
    },
    /// A plain decision of `cost` units: whether an acquire would be
    /// admitted now, holding nothing.
    Peek {
        /// The units asked about.
        cost: u64,
    },
    /// Release the permit `id`.
    Release {
        /// The permit's identifier.
        id: PermitId,
    },
    /// Extend the permit `id` by the limit's `ttl` from now.
    Extend {
        /// The permit's identifier.
        id: PermitId,
    },
}

impl PermitOp {
    /// Applies the operation to `set` at `now` under `rate` (`L` and the
    /// `ttl` as its window), as the pure functions define it. Inlined, so
    /// that a caller whose operation is known (a permit's release) keeps
    /// only its branch.
    #[inline]
    pub(crate) fn apply(self, set: &mut PermitSet, rate: &super::Rate, now: u64) -> PermitOutcome {
        match self {
            PermitOp::Acquire { id, cost } => acquire(set, rate.limit, rate.window, now, id, cost),
            PermitOp::Peek { cost } => peek(set, rate.limit, now, cost),
            PermitOp::Release { id } => release(set, now, id),
            PermitOp::Extend { id } => extend(set, rate.window, now, id),
        }
    }
}

/// What the rate functions ([`decide`](super::decide) and the others)
/// make of a concurrency limit: a request that holds nothing, against
/// no permits. It is admitted when its cost fits in `L`, leaves the whole
/// limit remaining and stores nothing. A backend answers a plain decision
/// on a concurrency limit from the key's permits instead
/// ([`peek`]); this keeps the rate functions total.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unheld;

impl super::Algorithm for Unheld {
    type State = super::FixedWindowState;

    fn decide(
        rate: &super::Rate,
        _: Option<Self::State>,
        _: u64,
        cost: u64,
    ) -> (super::Outcome, Option<Self::State>) {
        let allowed = super::unit_cost(cost) <= rate.limit;
        let outcome = super::Outcome {
            allowed,
            remaining: rate.limit,
            reset: 0,
            retry_after: None,
        };
        (outcome, None)
    }

    fn expires_at(_: &super::Rate, _: &Self::State) -> u64 {
        0
    }

    fn refund(_: &super::Rate, _: Option<Self::State>, _: u64, _: u64) -> Option<Self::State> {
        None
    }

    fn penalty(_: &super::Rate, _: Option<Self::State>, _: u64, _: u64) -> Option<Self::State> {
        None
    }
}

/// A plain decision of `cost` units on a key's permits at `now`: whether
/// a permit of `cost` would be granted now (the acquire's admission test
/// and answer), holding nothing; the set is left as an acquire would find
/// it.
pub(crate) fn peek(set: &mut PermitSet, limit: u64, now: u64, cost: u64) -> PermitOutcome {
    let now = set.at(now);
    let asked = cost.max(1);
    let fits = asked <= limit && set.held() + asked <= limit;
    PermitOutcome {
        retry_after: (!fits && asked <= limit).then(|| set.wait_for(asked, limit, now)),
        ..set.outcome(now, fits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: PermitId = PermitId(7);

    #[test]
    fn a_retried_acquire_holds_its_units_once() {
        let mut set = PermitSet::default();
        let first = acquire(&mut set, 3, 100, 10, ID, 2);
        let again = acquire(&mut set, 3, 100, 20, ID, 2);
        assert!(first.done && again.done);
        assert_eq!((again.in_flight, again.expires_in), (2, Some(90)));
    }

    #[test]
    fn a_denial_waits_for_the_expiries_that_make_room() {
        let mut set = PermitSet::default();
        acquire(&mut set, 3, 100, 0, PermitId(1), 1);
        acquire(&mut set, 3, 100, 10, PermitId(2), 2);
        let denied = acquire(&mut set, 3, 100, 20, PermitId(3), 2);
        assert!(!denied.done);
        assert_eq!(denied.retry_after, Some(90), "both permits must go for two units");
        let too_big = acquire(&mut set, 3, 100, 20, PermitId(4), 4);
        assert_eq!((too_big.done, too_big.retry_after), (false, None));
    }

    #[test]
    fn time_never_goes_back_for_a_key() {
        let mut set = PermitSet::default();
        acquire(&mut set, 1, 10, 100, ID, 1);
        let late = release(&mut set, 50, ID);
        assert!(
            late.done,
            "the release at 50 is taken at 100, before the expiry at 110"
        );
        acquire(&mut set, 1, 10, 200, PermitId(8), 1);
        assert!(!extend(&mut set, 10, 250, PermitId(8)).done, "expired at 210");
        assert!(set.is_empty());
    }
}
