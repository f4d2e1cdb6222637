//! Who is limited right now: per limiter, the keys with the most denied
//! requests, admitted units and shadow-denied requests over the last
//! minute, in bounded memory ([`TopKeys`]).

mod cut;
mod space_saving;
mod window;

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use once_cell::race::OnceBox;

use crate::clock::ClockHandle;
use crate::decision::Decision;

use window::Window;
pub(crate) use window::PERIOD;

/// Settings of a limiter's top keys: per limiter, the keys with the most
/// denied requests, admitted units and shadow-denied requests over the
/// last minute, in bounded memory.
///
/// Turn them on with [`LimiterBuilder::top_keys`](crate::LimiterBuilder::top_keys)
/// (or the policy file's `top_keys`), then ask the limiter:
///
/// ```
/// use std::time::Duration;
/// use tollgate::Limiter;
/// use tollgate::top::TopKeys;
/// use tollgate::top::TopMetric;
///
/// let limiter = Limiter::builder()
///     .limit(2)
///     .window(Duration::from_secs(60))
///     .top_keys(TopKeys::new())
///     .build()?;
/// for key in ["alice", "bob", "bob", "bob", "bob"] {
///     limiter.check(key);
/// }
/// let top = limiter.top_keys(TopMetric::Denied, 10).expect("top keys are on");
/// assert_eq!(top.keys[0].key, b"bob");
/// assert_eq!(top.keys[0].denied, 2);
/// // What a charge-free decision says bob has left:
/// assert_eq!(top.keys[0].remaining, Some(0));
/// # Ok::<(), tollgate::Error>(())
/// ```
///
/// # What the counts mean
///
/// Each metric is a Space-Saving summary (Metwally, Agrawal and El
/// Abbadi, 2005) of at most [`capacity`](Self::capacity) keys per minute:
/// a new key takes the place of the least counted one when the summary is
/// full, so memory does not grow with the number of distinct keys. A count
/// is never below the key's true count and at most [`TopKey::error`] above
/// it, and that error is at most [`TopList::error_bound`]: every key whose
/// true count is above the bound is listed. The bound is the smallest count
/// a full summary holds, 0 until more keys than the capacity arrive in a
/// minute (counts are exact until then), and at most the metric's total
/// over the capacity. Counts cover the last minute as the sliding-window
/// strategy estimates its window: the current minute plus the previous one
/// weighed by the share of it still inside the window. Peeks (cost 0) are
/// not counted. Keys longer than 256 bytes
/// are recorded by their start ([`TopKey::cut`]). Recording takes a lock
/// per decision, shared by the limiter's callers: it is off unless asked
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TopKeys {
    capacity: usize,
}

impl Default for TopKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl TopKeys {
    /// The keys held per metric and minute unless configured otherwise.
    pub(crate) const DEFAULT_CAPACITY: usize = 1_000;
    /// The most bytes of a key recorded; a longer key is recorded by its
    /// start.
    pub(crate) const MAX_KEY_BYTES: usize = 256;
    /// The largest capacity accepted.
    pub const MAX_CAPACITY: usize = 1_000_000;

    /// Top keys of 1,000 keys.
    pub const fn new() -> Self {
        Self {
            capacity: Self::DEFAULT_CAPACITY,
        }
    }

    /// Holds `keys` keys per metric and minute (1 to
    /// [`MAX_CAPACITY`](Self::MAX_CAPACITY), checked when the limiter is
    /// built). The memory taken is at most about `6 × keys` entries of a
    /// key and three counts.
    pub const fn capacity(mut self, keys: usize) -> Self {
        self.capacity = keys;
        self
    }

    /// The keys held per metric and minute.
    pub const fn get_capacity(&self) -> usize {
        self.capacity
    }

    /// Checks the capacity.
    pub(crate) fn validate(&self) -> Result<(), crate::ConfigError> {
        if self.capacity == 0 || self.capacity > Self::MAX_CAPACITY {
            return Err(crate::ConfigError::new(
                "top_keys.capacity",
                format!(
                    "{} is out of range: from 1 to {} keys",
                    self.capacity,
                    Self::MAX_CAPACITY
                ),
            ));
        }
        Ok(())
    }
}

/// What top keys are ranked by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopMetric {
    /// Denied requests (not counting shadow mode's, which are admitted).
    Denied,
    /// Admitted units: the costs of the admitted requests.
    Admitted,
    /// Requests shadow mode admitted that enforcement would deny.
    ShadowDenied,
}

impl TopMetric {
    /// Every metric.
    pub const ALL: [TopMetric; 3] = [TopMetric::Denied, TopMetric::Admitted, TopMetric::ShadowDenied];

    /// The metric's name: `denied`, `admitted` or `shadow_denied`.
    pub const fn name(self) -> &'static str {
        match self {
            TopMetric::Denied => "denied",
            TopMetric::Admitted => "admitted",
            TopMetric::ShadowDenied => "shadow_denied",
        }
    }

    /// The metric of a [`name`](Self::name), `None` for any other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One key of a [`TopList`], with its three counts over the last
/// one minute.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopKey {
    /// The key, or its first bytes when [`cut`](Self::cut).
    pub key: Vec<u8>,
    /// Whether `key` is the start of longer keys (over
    /// 256 bytes), counted together.
    pub cut: bool,
    /// Denied requests.
    pub denied: u64,
    /// Admitted units.
    pub admitted: u64,
    /// Shadow-denied requests.
    pub shadow_denied: u64,
    /// How far the ranked count may be above the true one. The other two
    /// counts are estimated alike: never below the true count.
    pub error: u64,
    /// What a charge-free decision of the key says is left now, when the
    /// limiter asked (see [`Limiter::top_keys`](crate::Limiter::top_keys));
    /// never for a cut key.
    pub remaining: Option<u64>,
}

impl TopKey {
    /// The count of `metric`.
    pub fn count(&self, metric: TopMetric) -> u64 {
        match metric {
            TopMetric::Denied => self.denied,
            TopMetric::Admitted => self.admitted,
            TopMetric::ShadowDenied => self.shadow_denied,
        }
    }
}

/// The keys with the highest counts of one metric, highest first.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopList {
    /// What the keys are ranked by.
    pub metric: TopMetric,
    /// The time the counts cover (one minute).
    pub window: Duration,
    /// The keys held per metric and minute.
    pub capacity: usize,
    /// No count of `metric` is more than this above the true count, and
    /// every key whose true count is above it is held.
    pub error_bound: u64,
    /// The keys, highest count first (ties by key).
    pub keys: Vec<TopKey>,
}

/// The capacity of a limiter's top keys, as the limiter holds it (beside
/// its flags, in 4 bytes): `None` when they are off. The settings must be
/// validated (a capacity from 1 to [`TopKeys::MAX_CAPACITY`]).
pub(crate) fn capacity_of(settings: Option<TopKeys>) -> Option<NonZeroU32> {
    settings.and_then(|s| u32::try_from(s.capacity).ok().and_then(NonZeroU32::new))
}

/// The settings of a capacity held by [`capacity_of`].
pub(crate) fn settings_of(capacity: Option<NonZeroU32>) -> Option<TopKeys> {
    capacity.map(|c| TopKeys::new().capacity(c.get() as usize))
}

/// A limiter's top keys table, made at the first decision counted (or the
/// first list asked for), behind one atomic pointer: a limiter that decides
/// nothing, one of the thousands an Envoy file may declare, holds 8 bytes
/// for it, and 4 for the capacity ([`capacity_of`]).
pub(crate) struct TopSlot {
    table: OnceBox<Arc<TopTable>>,
}

impl TopSlot {
    /// A slot of `capacity`, keeping the table of `previous` (the slot of a
    /// limiter being replaced) when it had the same capacity, so that a
    /// reload keeps the counts.
    pub(crate) fn new(
        capacity: Option<NonZeroU32>,
        previous: Option<(&TopSlot, Option<NonZeroU32>)>,
    ) -> Self {
        let table = OnceBox::new();
        if let Some(kept) = previous
            .filter(|(_, was)| *was == capacity && capacity.is_some())
            .and_then(|(p, _)| p.table.get())
        {
            let _ = table.set(Box::new(kept.clone()));
        }
        Self { table }
    }

    /// The table of `capacity` keys, made on first use with `clock` (the
    /// limiter's local clock).
    fn table(&self, capacity: NonZeroU32, clock: impl FnOnce() -> ClockHandle) -> &TopTable {
        self.table.get_or_init(|| {
            let settings = TopKeys::new().capacity(capacity.get() as usize);
            Box::new(Arc::new(TopTable::new(settings, clock())))
        })
    }

    /// Counts a decision of `cost` units for `key` ([`TopTable::record`]).
    pub(crate) fn record(
        &self,
        capacity: NonZeroU32,
        clock: impl FnOnce() -> ClockHandle,
        key: &[u8],
        decision: &Decision,
        cost: u64,
    ) {
        self.table(capacity, clock).record(key, decision, cost);
    }

    /// The `n` keys with the highest counts of `metric` now.
    pub(crate) fn list(
        &self,
        capacity: NonZeroU32,
        clock: impl FnOnce() -> ClockHandle,
        metric: TopMetric,
        n: usize,
    ) -> TopList {
        self.table(capacity, clock).list(metric, n)
    }
}

/// A limiter's top keys: the summaries, allocated at the first decision.
pub(crate) struct TopTable {
    settings: TopKeys,
    clock: ClockHandle,
    state: Mutex<Option<Box<State>>>,
}

/// The summaries of the three metrics.
struct State {
    hasher: ahash::RandomState,
    windows: [Window; 3],
}

impl TopTable {
    /// Empty top keys of `settings`, timed by `clock`.
    pub(crate) fn new(settings: TopKeys, clock: ClockHandle) -> Self {
        Self {
            settings,
            clock,
            state: Mutex::new(None),
        }
    }

    /// Counts a decision of `cost` units for `key` (peeks are not counted).
    pub(crate) fn record(&self, key: &[u8], decision: &Decision, cost: u64) {
        let (metric, weight) = if decision.shadow_denied {
            (TopMetric::ShadowDenied, 1)
        } else if decision.allowed {
            (TopMetric::Admitted, cost)
        } else {
            (TopMetric::Denied, 1)
        };
        if cost == 0 {
            return;
        }
        let now = self.clock.now_nanos();
        let (key, cut) = cut::recorded(key);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let capacity = self.settings.capacity;
        let state = state.get_or_insert_with(|| {
            Box::new(State {
                hasher: ahash::RandomState::new(),
                windows: std::array::from_fn(|_| Window::new(capacity)),
            })
        });
        let hash = state.hasher.hash_one((key, cut));
        let window = &mut state.windows[metric.index()];
        window.advance(now);
        window.add(hash, key, cut, weight);
    }

    /// The `n` keys with the highest counts of `metric` now.
    pub(crate) fn list(&self, metric: TopMetric, n: usize) -> TopList {
        let now = self.clock.now_nanos();
        let mut list = TopList {
            metric,
            window: PERIOD,
            capacity: self.settings.capacity,
            error_bound: 0,
            keys: Vec::new(),
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = state.as_mut() else {
            return list;
        };
        for window in &mut state.windows {
            window.advance(now);
        }
        let ranked = &state.windows[metric.index()];
        list.error_bound = ranked.bound(now);
        let mut estimates = ranked.estimates(now);
        estimates.retain(|(_, estimate)| estimate.count > 0);
        estimates.sort_unstable_by(|(a, x), (b, y)| y.count.cmp(&x.count).then_with(|| a.key.cmp(&b.key)));
        estimates.truncate(n);
        list.keys = estimates
            .into_iter()
            .map(|(entry, estimate)| {
                let mut counts = [0; 3];
                for other in TopMetric::ALL {
                    counts[other.index()] = if other == metric {
                        estimate.count
                    } else {
                        state.windows[other.index()]
                            .estimate(now, entry.hash(), &entry.key, entry.cut)
                            .count
                    };
                }
                TopKey {
                    key: entry.key.to_vec(),
                    cut: entry.cut,
                    denied: counts[TopMetric::Denied.index()],
                    admitted: counts[TopMetric::Admitted.index()],
                    shadow_denied: counts[TopMetric::ShadowDenied.index()],
                    error: estimate.error,
                    remaining: None,
                }
            })
            .collect();
        list
    }
}

#[cfg(test)]
mod tests;
