//! The four strategies as pure decision functions.
//!
//! Every strategy is a function
//! `decide(rate, state_before, now, cost) -> (Outcome, state_after)` with no
//! I/O, no clock and no locks. Backends only store the state between calls;
//! the in-memory table, the generic store adapter and any remote backend all
//! execute these same functions, so they agree decision for decision.
//!
//! Time is an integer count of *ticks* since the Unix epoch. The in-memory
//! backend uses nanoseconds; backends with coarser clocks (for example
//! microseconds) pass a [`Rate`] built for their unit. Readings later than
//! [`MAX_TICK`] count as [`MAX_TICK`]; with limits and windows within
//! [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT) and [`MAX_WINDOW_TICKS`] all arithmetic is exact. A state equal to
//! `None` is the absent (fresh) state; a strategy returns `None` whenever the
//! state after a decision is equivalent to absent, and treats expired state
//! as absent ([expired state is absent
//! state](crate::_documentation::semantics_notes#expired-state-is-absent-state)).

mod charge;
mod compound;
mod fixed_window;
mod gcra;
pub mod holds;
mod kind;
mod leaky_bucket;
mod lease;
pub mod permits;
mod reserve;
mod sliding_window;
pub(crate) mod tick;
mod token_bucket;

use crate::calendar::Calendar;

pub use charge::charge_all;
pub(crate) use charge::DecideAll;
pub use compound::{combine, decide_all, CompoundOutcome, LimitRate};
pub(crate) use fixed_window::FixedWindow;
pub use fixed_window::FixedWindowState;
pub use gcra::GcraState;
pub use kind::{Strategy, UnknownStrategy};
pub(crate) use leaky_bucket::LeakyBucket;
pub(crate) use lease::give_back;
pub use lease::{lease_all, return_before, window_end, LeaseOutcome};
pub(crate) use permits::Unheld;
pub use reserve::{cancel_all, reserve_all, ReserveOutcome};
pub(crate) use sliding_window::SlidingWindow;
pub use sliding_window::SlidingWindowState;
pub(crate) use tick::Tick;
pub(crate) use token_bucket::TokenBucket;

/// The largest limit `L` of any rate: 2^62.
///
/// With `L` and `W` at most 2^62 and clock readings at most [`MAX_TICK`],
/// every time a strategy computes (`now + L × T`, `now + 2W`) fits in 64
/// bits and every product (`L × W`, `prev × (W − e)`) in 128 bits, so every
/// decision is exact integer arithmetic. [`crate::Policy::new`] refuses larger
/// limits, naming the field; [`Rate::new`] clamps to it.
pub(crate) const MAX_LIMIT: u64 = 1 << 62;

/// The longest window `W` of any rate, in ticks: 2^62 (about 146 years of
/// nanoseconds; [`crate::Policy::MAX_WINDOW`], the longest a policy accepts, is
/// shorter). [`Rate::new`] clamps to it.
pub const MAX_WINDOW_TICKS: u64 = 1 << 62;

/// The latest clock reading a decision uses: 2^63 − 1 ticks, in nanoseconds
/// 2262-04-11T23:47:16.854775807Z (the end of 64-bit signed nanosecond
/// time).
///
/// Every strategy counts a later reading as exactly this one, and so do the
/// in-memory sweeps and the store adapter's expiries: past it the clock
/// stands still, nothing refills and no state expires, so no request beyond
/// the limit is ever admitted (`retry_after` then names a delay that never
/// comes). Together with [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT) and [`MAX_WINDOW_TICKS`] this keeps
/// every intermediate time below 2^64.
pub const MAX_TICK: u64 = (1 << 63) - 1;

/// A policy's limit and window expressed in a backend's clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// `L`: units admitted per window, from 1 to [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT).
    pub limit: u64,
    /// `W`: the window in ticks, from 1 to [`MAX_WINDOW_TICKS`]; for a
    /// calendar window ([`Rate::per_calendar`]), a mark above
    /// [`MAX_WINDOW_TICKS`] that names the calendar, read with
    /// [`Rate::calendar`] (so that a rate stays 24 bytes).
    pub window: u64,
    /// `T = max(1, W / L)`: the emission interval in ticks.
    pub interval: u64,
}

/// The bit of [`Rate::window`] that marks a calendar window: every window
/// of a fixed length is at most [`MAX_WINDOW_TICKS`], below it. The bits
/// below hold the calendar (16) and the tick (1).
const CALENDAR_MARK: u64 = 1 << 63;

/// A calendar read in a backend's clock ticks: what a calendar window's
/// [`Rate`] names ([`Rate::calendar`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalendarTicks {
    /// The periods.
    pub calendar: Calendar,
    /// The backend's tick.
    pub tick: Tick,
}

impl CalendarTicks {
    /// The period that holds `now`: its start and the start of the next,
    /// in ticks. A period that began before the epoch starts at 0.
    pub fn period_at(&self, now: u64) -> (u64, u64) {
        self.calendar.periods().period_at(now, self.tick.nanos())
    }
}

impl Rate {
    /// Builds a rate from a limit and a window in ticks.
    ///
    /// The limit must be from 1 to [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT) and the window from 1 to
    /// [`MAX_WINDOW_TICKS`]; [`crate::Policy`] validates this before any rate
    /// is built, so this constructor clamps into those ranges rather than
    /// fails. Build rates with it: a rate whose public fields are set outside
    /// them loses the guarantee of exact arithmetic.
    pub fn new(limit: u64, window: u64) -> Self {
        let limit = limit.clamp(1, MAX_LIMIT);
        let window = window.clamp(1, MAX_WINDOW_TICKS);
        Self {
            limit,
            window,
            interval: (window / limit).max(1),
        }
    }

    /// The rate of a fixed window of `limit` per period of `calendar`,
    /// whose periods last at most `longest` ticks (its `interval` is
    /// `longest / limit`).
    pub fn per_calendar(limit: u64, calendar: CalendarTicks, longest: u64) -> Self {
        let tick = match calendar.tick {
            Tick::Nanos => 0,
            Tick::Micros => 1 << 16,
        };
        let limit = limit.clamp(1, MAX_LIMIT);
        Self {
            limit,
            window: CALENDAR_MARK | tick | u64::from(calendar.calendar.raw()),
            interval: (longest.clamp(1, MAX_WINDOW_TICKS) / limit).max(1),
        }
    }

    /// Whether the rate is a calendar window's (one bit of `window`).
    #[inline(always)]
    pub(crate) fn is_calendar(&self) -> bool {
        self.window & CALENDAR_MARK != 0
    }

    /// The calendar whose periods a fixed window's buckets are, in place
    /// of `W`-long buckets from the epoch; `None` for every other rate.
    pub fn calendar(&self) -> Option<CalendarTicks> {
        if self.window & CALENDAR_MARK == 0 {
            return None;
        }
        Some(CalendarTicks {
            calendar: Calendar::from_raw(self.window as u16)?,
            tick: if self.window & (1 << 16) == 0 {
                Tick::Nanos
            } else {
                Tick::Micros
            },
        })
    }
}

/// The result of one decision, in ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Further unit requests that would be admitted at the same instant.
    pub remaining: u64,
    /// Ticks until the key's state is fresh again if nothing else arrives.
    pub reset: u64,
    /// When denied: ticks until this same request would be admitted; `None`
    /// when allowed or when it can never be admitted (`cost > limit`).
    pub retry_after: Option<u64>,
}

/// One strategy: its state type and its pure decision function.
pub(crate) trait Algorithm {
    /// The state kept per key between decisions.
    type State: Copy + PartialEq + Send + Sync + 'static;

    /// Decides one request of `cost` units at `now`, returning the outcome
    /// and the state to store (`None`: delete the state, it equals absent).
    fn decide(rate: &Rate, state: Option<Self::State>, now: u64, cost: u64)
        -> (Outcome, Option<Self::State>);

    /// The tick from which `state` is equivalent to absent state and may be
    /// deleted.
    fn expires_at(rate: &Rate, state: &Self::State) -> u64;

    /// Gives back up to `cost` units the state was charged, at `now`
    /// ([per-key operations](crate::_documentation::semantics#per-key-operations)).
    fn refund(rate: &Rate, state: Option<Self::State>, now: u64, cost: u64) -> Option<Self::State>;

    /// Charges `cost` units at `now` without an admission test
    /// ([per-key operations](crate::_documentation::semantics#per-key-operations)).
    fn penalty(rate: &Rate, state: Option<Self::State>, now: u64, cost: u64) -> Option<Self::State>;
}

/// The state of any strategy, for backends that store all strategies alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Fixed-window state.
    FixedWindow(FixedWindowState),
    /// Sliding-window state.
    SlidingWindow(SlidingWindowState),
    /// Token-bucket or leaky-bucket state.
    Gcra(GcraState),
}

/// Runs `$body` with `$alg` the [`Algorithm`] of `$strategy`, `$typed` the
/// typed state (`None` when the stored state is of another kind, for example
/// after a policy changed its strategy under the same key) and `$wrap` the
/// constructor that turns a typed state back into a [`State`].
macro_rules! by_strategy {
    ($strategy:expr, $state:expr, |$alg:ident, $typed:ident, $wrap:ident| $body:expr) => {
        match $strategy {
            Strategy::FixedWindow => {
                type $alg = FixedWindow;
                let $wrap = State::FixedWindow;
                let $typed = match $state {
                    Some(State::FixedWindow(s)) => Some(s),
                    _ => None,
                };
                $body
            }
            Strategy::SlidingWindow => {
                type $alg = SlidingWindow;
                let $wrap = State::SlidingWindow;
                let $typed = match $state {
                    Some(State::SlidingWindow(s)) => Some(s),
                    _ => None,
                };
                $body
            }
            Strategy::TokenBucket => {
                type $alg = TokenBucket;
                let $wrap = State::Gcra;
                let $typed = match $state {
                    Some(State::Gcra(s)) => Some(s),
                    _ => None,
                };
                $body
            }
            Strategy::LeakyBucket => {
                type $alg = LeakyBucket;
                let $wrap = State::Gcra;
                let $typed = match $state {
                    Some(State::Gcra(s)) => Some(s),
                    _ => None,
                };
                $body
            }
            // Nothing is stored for it: `$wrap` is never called.
            Strategy::Concurrency => {
                type $alg = Unheld;
                let $wrap = State::FixedWindow;
                let $typed = None;
                $body
            }
        }
    };
}

/// Runs the decision function of `strategy` on a strategy-agnostic [`State`].
///
/// A stored state of the wrong kind (for example after a policy changed its
/// strategy under the same key) is treated as absent.
// Inlined into its callers (the compound decision's loop), the outcome
// stays in registers instead of being returned through the stack and read
// back, which costs more than the decision itself.
#[inline(always)]
pub fn decide(
    strategy: Strategy,
    rate: &Rate,
    state: Option<State>,
    now: u64,
    cost: u64,
) -> (Outcome, Option<State>) {
    by_strategy!(strategy, state, |A, s, wrap| {
        let (outcome, next) = A::decide(rate, s, now, cost);
        (outcome, next.map(wrap))
    })
}

/// The refund of `strategy` on a strategy-agnostic [`State`].
pub fn refund(strategy: Strategy, rate: &Rate, state: Option<State>, now: u64, cost: u64) -> Option<State> {
    by_strategy!(strategy, state, |A, s, wrap| A::refund(rate, s, now, cost)
        .map(wrap))
}

/// The penalty of `strategy` on a strategy-agnostic [`State`].
pub fn penalty(strategy: Strategy, rate: &Rate, state: Option<State>, now: u64, cost: u64) -> Option<State> {
    by_strategy!(strategy, state, |A, s, wrap| A::penalty(rate, s, now, cost)
        .map(wrap))
}

/// The tick from which a strategy-agnostic state may be deleted.
pub fn expires_at(rate: &Rate, state: &State) -> u64 {
    match state {
        State::FixedWindow(s) => FixedWindow::expires_at(rate, s),
        State::SlidingWindow(s) => SlidingWindow::expires_at(rate, s),
        State::Gcra(s) => gcra::expires_at(s),
    }
}

/// The clock reading a decision uses: `now`, or [`MAX_TICK`] when later.
#[inline]
pub(crate) fn clamp_time(now: u64) -> u64 {
    now.min(MAX_TICK)
}

/// The cost used in admission tests: a peek (`cost = 0`) asks about one unit.
#[inline]
pub(crate) fn unit_cost(cost: u64) -> u64 {
    cost.max(1)
}
