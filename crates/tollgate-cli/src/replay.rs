//! Replaying a trace through limiters on the trace's own clock (in memory
//! here; on Redis through [`replay_through`]), and the statistics collected
//! on the way.

use std::time::{Duration, UNIX_EPOCH};

use tollgate::backend::Backend;
use tollgate::calendar::Calendar;
use tollgate::clock::ManualClock;
use tollgate::{Decision, Limit, Limiter, Listed, MemoryBackend, Policy};

use tollgate_config::Settings;

use crate::targets::Targets;
use crate::trace::{Request, Trace};

/// The distribution of `delays` (nanoseconds), nearest-rank percentiles.
fn delay_stats(mut delays: Vec<u64>) -> Delays {
    delays.sort_unstable();
    let rank = |p: usize| -> Duration {
        if delays.is_empty() {
            return Duration::ZERO;
        }
        let i = (delays.len() * p).div_ceil(100).max(1) - 1;
        Duration::from_nanos(delays[i])
    };
    Delays {
        delayed: delays.iter().filter(|&&d| d > 0).count() as u64,
        p50: rank(50),
        p99: rank(99),
        max: delays.last().map_or(Duration::ZERO, |&d| Duration::from_nanos(d)),
    }
}

/// How many keys [`Stats::most_denied`] names.
pub const MOST_DENIED: usize = 3;

/// What one policy did with a trace (or with the requests it applied to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// What the row is called: the strategy's name, or a policy file's
    /// target (`default` or the resource).
    pub name: String,
    /// Requests decided.
    pub requests: u64,
    /// Requests admitted (peeks of cost 0 included).
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
    /// Distinct keys among the requests decided.
    pub keys: usize,
    /// The busiest window of any key, over the window of limit
    /// [`Stats::measured`], counting what the limits admitted (requests of
    /// exempt keys, and those only shadow mode let through, are left out).
    pub peak: Peak,
    /// The keys with the most denied requests, at most [`MOST_DENIED`]:
    /// (index in [`Trace::keys`], denied requests), most denied first, ties
    /// to the key seen first; keys with nothing denied are left out.
    pub most_denied: Vec<(usize, u64)>,
    /// For a compound policy, what each of its limits did, in the policy's
    /// order; empty for a policy of one limit.
    pub limits: Vec<LimitStats>,
    /// The index of the limit that mattered most, whose window
    /// [`Stats::peak`] is measured over (and the chart draws): the limit
    /// that denied the most requests; among equals, the one that bound the
    /// most decisions ([`Decision::bound_by`]), then the first listed.
    /// Always 0 for a policy of one limit.
    pub measured: usize,
    /// What the policy file's lists and shadow mode did.
    pub lists: ListStats,
    /// With `--max-delay`, how long the admitted requests waited.
    pub delays: Option<Delays>,
    /// For a policy with a calendar window, the calendar and the
    /// boundaries between its periods that fall within the requests'
    /// times, in nanoseconds since the epoch (where every key's count
    /// started again).
    pub boundaries: Option<(Calendar, Vec<u64>)>,
}

/// How long the requests admitted under `--max-delay` waited for their
/// turn (those admitted at once count as waiting zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delays {
    /// Requests that waited (a delay above zero).
    pub delayed: u64,
    /// The median wait of the admitted requests.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The longest.
    pub max: Duration,
}

/// What a policy file's exempt and deny lists and shadow mode did to one
/// policy's requests; each count is `None` when the policy has no such
/// setting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListStats {
    /// Requests of exempt keys: allowed, neither charged nor counted
    /// against the limits.
    pub exempt: Option<u64>,
    /// Requests of keys on the deny list: denied.
    pub deny_listed: Option<u64>,
    /// In shadow mode, requests allowed only because of it: enforcement
    /// would have denied them ([`Decision::shadow_denied`]).
    pub shadow_denied: Option<u64>,
    /// In shadow mode, the keys with the most such requests, as
    /// [`Stats::most_denied`] names denied ones.
    pub most_shadow_denied: Vec<(usize, u64)>,
}

/// What one limit of a compound policy did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitStats {
    /// The limit.
    pub limit: Limit,
    /// Requests it denied: a denied request counts for the limit that bound
    /// it, the denying limit with the longest retry. In shadow mode, the
    /// requests it would have denied; requests of listed keys never count.
    pub denied: u64,
    /// The busiest window of any key, over this limit's window.
    pub peak: Peak,
}

/// The most units admitted for one key inside one window length (for a
/// calendar window, inside one of its periods).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// The units admitted within `[t, t + W)` for the best key and `t`.
    pub units: u128,
    /// The index of that key in [`Trace::keys`] (`None` when nothing with a
    /// positive cost was admitted). Ties go to the key seen first.
    pub key: Option<usize>,
}

/// A manual clock and an in-memory backend on it, for replaying `trace`.
///
/// Deleting expired state is only equivalent to keeping it while time moves
/// forward, so the backend of an unsorted trace keeps every key's state.
fn replay_backend(trace: &Trace) -> (ManualClock, MemoryBackend) {
    let clock = ManualClock::default();
    let sorted = trace.requests.windows(2).all(|w| w[0].nanos <= w[1].nanos);
    let backend = MemoryBackend::new().clock(clock.clone()).reclaim(sorted);
    (clock, backend)
}

/// Replays `trace` under the policies of `targets` on one in-memory
/// backend (the policies' state kept apart, as a policy file's limiter
/// keeps its resources'): before each request the manual clock is set to
/// the request's time, then the request is decided with
/// [`Limiter::check_n`] by its target's policy. `sink` sees every request
/// with the index of its target and its decision, in input order. Returns
/// one [`Stats`] per target, in target order.
///
/// # Errors
///
/// The first error returned by `sink`, or [`tollgate::Error`] converted into
/// `E` when a limiter cannot be built.
pub fn replay<E>(
    trace: &Trace,
    targets: &Targets,
    sink: impl FnMut(&Request, usize, &Decision) -> Result<(), E>,
) -> Result<Vec<Stats>, E>
where
    E: From<tollgate::Error>,
{
    let (clock, backend) = replay_backend(trace);
    let limiters = limiters(targets, &backend, tollgate::Limiter::DEFAULT_KEY_PREFIX)
        .map_err(|(_, err)| E::from(err))?;
    replay_through(
        trace,
        targets,
        |request, target, key| {
            clock.set_nanos(request.nanos);
            Ok(limiters[target].check_n(key.as_bytes(), request.cost))
        },
        sink,
    )
}

/// One limiter per target of `targets` on `backend`, with state keys under
/// `prefix`, laid out as [`tollgate::Limiters`] lays out a policy
/// file's: the first target (the default, or the one policy of the flags)
/// under the empty resource, every other under its name. So one layout
/// serves every backend, compound policies included.
///
/// # Errors
///
/// The index of the target whose policy `backend` refuses, with the error.
pub fn limiters<B: Backend + Clone>(
    targets: &Targets,
    backend: &B,
    prefix: &str,
) -> Result<Vec<Limiter<B>>, (usize, tollgate::Error)> {
    targets
        .policies
        .iter()
        .enumerate()
        .zip(&targets.settings)
        .map(|((i, (name, policy)), settings)| {
            settings
                .configure(Limiter::builder().backend(backend.clone()))
                .policy(*policy)
                .key_prefix(prefix)
                .resource(if i == 0 { "" } else { name.as_str() })
                .build()
                .map_err(|err| (i, err))
        })
        .collect()
}

/// Replays `trace` under the policies of `targets` through
/// `replay_request`, which is given each request (in input order) with the index of its target and
/// its key and returns the decision; it is responsible for setting its
/// limiter's clock to the request's time. `sink` sees every request with
/// its target and decision, and the statistics are collected on the way:
/// one [`Stats`] per target, in target order.
///
/// # Errors
///
/// The first error returned by `replay_request` or `sink`.
pub fn replay_through<E>(
    trace: &Trace,
    targets: &Targets,
    mut replay_request: impl FnMut(&Request, usize, &str) -> Result<Decision, E>,
    sink: impl FnMut(&Request, usize, &Decision) -> Result<(), E>,
) -> Result<Vec<Stats>, E> {
    replay_with(
        trace,
        targets,
        false,
        |request, target, key| Ok((replay_request(request, target, key)?, Duration::ZERO)),
        sink,
    )
}

/// Replays `trace` in memory as [`replay`] does, but each request waits up
/// to `max_delay` for its turn instead of being refused: it is reserved
/// ([`Limiter::reserve_n`]) and admitted when the reservation is made, its
/// admission counted at the time it proceeds (its time plus its delay).
/// The statistics then say how long the admitted requests waited
/// ([`Stats::delays`]).
///
/// # Errors
///
/// As for [`replay`].
pub fn replay_waiting<E>(
    trace: &Trace,
    targets: &Targets,
    max_delay: Duration,
    sink: impl FnMut(&Request, usize, &Decision) -> Result<(), E>,
) -> Result<Vec<Stats>, E>
where
    E: From<tollgate::Error>,
{
    let (clock, backend) = replay_backend(trace);
    let limiters = limiters(targets, &backend, tollgate::Limiter::DEFAULT_KEY_PREFIX)
        .map_err(|(_, err)| E::from(err))?;
    // The in-memory limiter answers at once: its futures are ready when
    // first polled, on a runtime without a driver.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|err| {
            E::from(tollgate::Error::Config(tollgate::ConfigError::new(
                "runtime",
                err.to_string(),
            )))
        })?;
    replay_with(
        trace,
        targets,
        true,
        |request, target, key| {
            clock.set_nanos(request.nanos);
            let reservation =
                runtime.block_on(limiters[target].reserve_n(key.as_bytes(), request.cost, max_delay))?;
            Ok((*reservation.decision(), reservation.delay()))
        },
        sink,
    )
}

/// [`replay_through`], each request's decision coming with the delay after
/// which it proceeds (zero without waiting); `waiting` collects the delays.
fn replay_with<E>(
    trace: &Trace,
    targets: &Targets,
    waiting: bool,
    mut replay_request: impl FnMut(&Request, usize, &str) -> Result<(Decision, Duration), E>,
    mut sink: impl FnMut(&Request, usize, &Decision) -> Result<(), E>,
) -> Result<Vec<Stats>, E> {
    let mut tallies: Vec<Tally> = targets
        .policies
        .iter()
        .zip(&targets.settings)
        .map(|((_, policy), settings)| Tally::new(trace.keys.len(), *policy, settings))
        .collect();
    for tally in &mut tallies {
        tally.delays = waiting.then(Vec::new);
    }
    for request in &trace.requests {
        let target = targets.of(request);
        let (decision, delay) = replay_request(request, target, &trace.keys[request.key])?;
        tallies[target].record(request, &decision, delay);
        sink(request, target, &decision)?;
    }
    Ok(tallies
        .into_iter()
        .zip(&targets.policies)
        .map(|(tally, (name, _))| tally.finish(name))
        .collect())
}

/// The statistics of one policy, collected one decision at a time.
#[derive(Clone, Debug)]
struct Tally {
    /// The policy.
    policy: Policy,
    /// (the key's rank in `order`, time, cost) of every admitted request of
    /// positive cost: one list for all keys, so a key with one request costs
    /// no allocation of its own.
    admitted_at: Vec<(usize, u64, u64)>,
    /// Per key: denied requests.
    denied_by_key: Vec<u64>,
    /// Per key: its rank in `order`, or `usize::MAX` before its first
    /// request.
    rank: Vec<usize>,
    /// The keys recorded, in order of their first request here: ties go to
    /// the key seen first by this policy.
    order: Vec<usize>,
    /// Requests recorded.
    requests: u64,
    /// Requests admitted.
    admitted: u64,
    /// Per limit of the policy: (requests it denied, decisions it bound).
    bound: Vec<(u64, u64)>,
    /// The lists and shadow mode the policy was replayed with.
    settings: (bool, bool, bool),
    /// Requests of exempt keys, of deny-listed keys.
    listed: (u64, u64),
    /// Per key: requests allowed only by shadow mode.
    shadow_denied_by_key: Vec<u64>,
    /// When replayed waiting: the delay of every admitted request, in
    /// nanoseconds.
    delays: Option<Vec<u64>>,
    /// The earliest and the latest request's time.
    span: Option<(u64, u64)>,
}

impl Tally {
    /// An empty tally for a trace with `keys` keys, under `policy` with
    /// `settings`.
    fn new(keys: usize, policy: Policy, settings: &Settings) -> Self {
        Self {
            policy,
            admitted_at: Vec::new(),
            denied_by_key: vec![0; keys],
            rank: vec![usize::MAX; keys],
            order: Vec::new(),
            requests: 0,
            admitted: 0,
            bound: vec![(0, 0); policy.limits().len()],
            settings: (
                !settings.exempt.is_empty(),
                !settings.deny.is_empty(),
                settings.shadow,
            ),
            listed: (0, 0),
            shadow_denied_by_key: if settings.shadow {
                vec![0; keys]
            } else {
                Vec::new()
            },
            delays: None,
            span: None,
        }
    }

    /// Counts one decided request, which proceeds after `delay` when
    /// admitted.
    fn record(&mut self, request: &Request, decision: &Decision, delay: Duration) {
        self.requests += 1;
        let (first, last) = self.span.unwrap_or((request.nanos, request.nanos));
        self.span = Some((first.min(request.nanos), last.max(request.nanos)));
        if self.rank[request.key] == usize::MAX {
            self.rank[request.key] = self.order.len();
            self.order.push(request.key);
        }
        match decision.listed {
            Some(Listed::Exempt) => self.listed.0 += 1,
            Some(Listed::Denied) => self.listed.1 += 1,
            None => {
                if let Some((denied, bound)) = self.bound.get_mut(decision.bound_by) {
                    *denied += u64::from(!decision.allowed || decision.shadow_denied);
                    *bound += 1;
                }
            }
        }
        if decision.shadow_denied {
            if let Some(count) = self.shadow_denied_by_key.get_mut(request.key) {
                *count += 1;
            }
        }
        if decision.allowed {
            self.admitted += 1;
            let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
            if let Some(delays) = &mut self.delays {
                delays.push(delay);
            }
            // What the limits admitted: not exempt keys, nor what only
            // shadow mode let through (neither is charged), counted when
            // it proceeds.
            let charged = decision.listed.is_none() && !decision.shadow_denied;
            if request.cost > 0 && charged {
                self.admitted_at.push((
                    self.rank[request.key],
                    request.nanos.saturating_add(delay),
                    request.cost,
                ));
            }
        } else {
            self.denied_by_key[request.key] += 1;
        }
    }

    /// The statistics, for a row called `name`.
    fn finish(mut self, name: &str) -> Stats {
        // Each key's admissions together, keys in the order seen.
        self.admitted_at.sort_unstable();
        // Most denied, then most bound; `max_by_key` keeps the last maximum,
        // so the index is reversed to let ties go to the first limit.
        let measured = (0..self.bound.len())
            .max_by_key(|&i| (self.bound[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        let limits: Vec<LimitStats> = if self.policy.is_compound() {
            self.policy
                .limits()
                .iter()
                .zip(&self.bound)
                .map(|(limit, &(denied, _))| LimitStats {
                    limit: *limit,
                    denied,
                    peak: self.peak(limit),
                })
                .collect()
        } else {
            Vec::new()
        };
        let peak = match limits.get(measured) {
            Some(limit) => limit.peak,
            None => self.peak(&self.policy.limits()[measured]),
        };
        let boundaries = self
            .policy
            .limits()
            .iter()
            .find_map(Limit::calendar)
            .map(|calendar| {
                (
                    calendar,
                    self.span.map_or_else(Vec::new, |span| boundaries(calendar, span)),
                )
            });
        Stats {
            name: name.to_owned(),
            requests: self.requests,
            admitted: self.admitted,
            denied: self.requests - self.admitted,
            keys: self.order.len(),
            peak,
            most_denied: most_denied(
                self.order.iter().map(|&key| (key, self.denied_by_key[key])),
                MOST_DENIED,
            ),
            limits,
            measured,
            lists: self.list_stats(),
            delays: self.delays.take().map(delay_stats),
            boundaries,
        }
    }

    /// What the lists and shadow mode did.
    fn list_stats(&self) -> ListStats {
        let (exempt, deny, shadow) = self.settings;
        let shadow_denied = shadow.then(|| self.shadow_denied_by_key.iter().sum());
        ListStats {
            exempt: exempt.then_some(self.listed.0),
            deny_listed: deny.then_some(self.listed.1),
            shadow_denied,
            most_shadow_denied: most_denied(
                self.order
                    .iter()
                    .filter_map(|&key| Some((key, *self.shadow_denied_by_key.get(key)?))),
                MOST_DENIED,
            ),
        }
    }

    /// The busiest window of `limit` for any key (for a calendar window,
    /// its busiest period), from `admitted_at` sorted by key.
    fn peak(&self, limit: &Limit) -> Peak {
        let mut peak = Peak::default();
        let mut events = Vec::new();
        for group in self.admitted_at.chunk_by(|a, b| a.0 == b.0) {
            events.clear();
            events.extend(group.iter().map(|&(_, time, cost)| (time, cost)));
            let units = match limit.calendar() {
                Some(calendar) => peak_in_periods(&mut events, calendar),
                None => peak_units(&mut events, limit.window().as_nanos()),
            };
            if units > peak.units {
                peak = Peak {
                    units,
                    key: Some(self.order[group[0].0]),
                };
            }
        }
        peak
    }
}

/// The `n` keys with the most denied requests, given (key, denied count)
/// pairs in tie-breaking order: (key, count), most first, ties in the
/// order given; keys with a count of zero are left out.
pub fn most_denied(denied: impl IntoIterator<Item = (usize, u64)>, n: usize) -> Vec<(usize, u64)> {
    let mut keys: Vec<(usize, u64)> = denied.into_iter().filter(|&(_, count)| count > 0).collect();
    // Stable: equal counts keep their order.
    keys.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    keys.truncate(n);
    keys
}

/// The largest total cost of `events` (time in nanoseconds, cost) within one
/// period of `calendar`. Sorts `events` by time.
pub fn peak_in_periods(events: &mut [(u64, u64)], calendar: Calendar) -> u128 {
    events.sort_unstable_by_key(|&(time, _)| time);
    let mut best = 0;
    let mut sum: u128 = 0;
    let mut end = 0;
    for &(time, cost) in events.iter() {
        if time >= end {
            sum = 0;
            end = period_end(calendar, time);
        }
        sum += u128::from(cost);
        best = best.max(sum);
    }
    best
}

/// The boundaries of `calendar`'s periods within `(first, last]`, in
/// nanoseconds since the epoch, at most [`MAX_BOUNDARIES`] of them.
pub fn boundaries(calendar: Calendar, (first, last): (u64, u64)) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = first;
    while out.len() < MAX_BOUNDARIES {
        let end = period_end(calendar, at);
        if end > last || end <= at {
            break;
        }
        out.push(end);
        at = end;
    }
    out
}

/// The most boundaries [`boundaries`] lists: a trace of years under a
/// daily quota would otherwise list thousands.
pub const MAX_BOUNDARIES: usize = 1_000;

/// The end of the period of `calendar` that holds `time` (nanoseconds
/// since the epoch).
pub fn period_end(calendar: Calendar, time: u64) -> u64 {
    let (_, end) = calendar.period_at(UNIX_EPOCH + Duration::from_nanos(time));
    end.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The largest total cost of `events` (time in nanoseconds, cost) within any
/// half-open interval `[t, t + window)`. Sorts `events` by time.
pub fn peak_units(events: &mut [(u64, u64)], window: u128) -> u128 {
    events.sort_unstable_by_key(|&(time, _)| time);
    let mut best = 0;
    let mut sum: u128 = 0;
    let mut end = 0;
    // The best interval can always start at an event's time.
    for start in 0..events.len() {
        let limit = u128::from(events[start].0) + window;
        while end < events.len() && u128::from(events[end].0) < limit {
            sum += u128::from(events[end].1);
            end += 1;
        }
        best = best.max(sum);
        sum -= u128::from(events[start].1);
    }
    best
}

#[cfg(test)]
mod tests {
    use tollgate::Strategy;

    use super::*;

    #[test]
    fn peak_of_nothing_is_zero() {
        assert_eq!(peak_units(&mut [], 10), 0);
    }

    #[test]
    fn peak_window_is_half_open() {
        let mut events = [(10, 1), (19, 2), (20, 4)];
        assert_eq!(peak_units(&mut events, 10), 6); // [10, 20) or [19, 29)
        let mut events = [(20, 4), (10, 1), (19, 2)];
        assert_eq!(peak_units(&mut events, 11), 7); // [10, 21)
        assert_eq!(peak_units(&mut events, 1), 4);
    }

    proptest::proptest! {
        #[test]
        fn peak_matches_brute_force(
            window in 1..=50u128,
            events in proptest::collection::vec((0..200u64, 0..5u64), 0..30),
        ) {
            let brute = events
                .iter()
                .map(|&(t, _)| {
                    events
                        .iter()
                        .filter(|&&(u, _)| u >= t && u128::from(u) < u128::from(t) + window)
                        .map(|&(_, c)| u128::from(c))
                        .sum::<u128>()
                })
                .max()
                .unwrap_or(0);
            proptest::prop_assert_eq!(peak_units(&mut events.clone(), window), brute);
        }

        /// Per period of a day in New York (23- and 25-hour days
        /// included): the sum of each period's events, found by comparing
        /// each event's period with every other's.
        #[test]
        fn peak_in_periods_matches_brute_force(
            events in proptest::collection::vec((0..400u64, 0..5u64), 0..40),
        ) {
            let day = Calendar::new(tollgate::calendar::Period::Day, "America/New_York", None).unwrap();
            // Hours from 2026-03-01T00:00:00Z, across the spring change.
            let events: Vec<(u64, u64)> = events
                .into_iter()
                .map(|(h, c)| (1_772_323_200_000_000_000 + h * 3_600_000_000_000, c))
                .collect();
            let start_of = |t: u64| day.period_at(UNIX_EPOCH + Duration::from_nanos(t)).0;
            let brute = events
                .iter()
                .map(|&(t, _)| {
                    events
                        .iter()
                        .filter(|&&(u, _)| start_of(u) == start_of(t))
                        .map(|&(_, c)| u128::from(c))
                        .sum::<u128>()
                })
                .max()
                .unwrap_or(0);
            proptest::prop_assert_eq!(peak_in_periods(&mut events.clone(), day), brute);
            // Every boundary listed ends a period and starts the next.
            if let (Some(first), Some(last)) = (events.iter().map(|e| e.0).min(), events.iter().map(|e| e.0).max()) {
                for b in boundaries(day, (first, last)) {
                    proptest::prop_assert!(first < b && b <= last);
                    proptest::prop_assert_eq!(start_of(b), UNIX_EPOCH + Duration::from_nanos(b));
                    proptest::prop_assert_eq!(period_end(day, b - 1), b);
                }
            }
        }
    }

    #[test]
    fn replay_counts_and_names_the_busiest_key() {
        let trace =
            crate::trace::csv::parse("time,key,cost\n0,a,1\n0,b,2\n1,b,1\n2,a,1\n1000,b,2\n".as_bytes())
                .unwrap();
        let limit = Limit::new(Strategy::FixedWindow, 3, Duration::from_secs(1)).unwrap();
        let mut seen = Vec::new();
        let stats = replay(&trace, &Targets::one(limit), |r, _, d| {
            seen.push((r.line, d.allowed));
            Ok::<_, tollgate::Error>(())
        })
        .unwrap()
        .remove(0);
        assert_eq!(stats.name, "fixed_window");
        assert_eq!(seen, [(2, true), (3, true), (4, true), (5, true), (6, true)]);
        assert_eq!(
            (stats.requests, stats.admitted, stats.denied, stats.keys),
            (5, 5, 0, 2)
        );
        // b: 2 + 1 in [0, 1s), then 2 at 1s: the window [1ms, 1001ms) holds 3.
        assert_eq!(
            stats.peak,
            Peak {
                units: 3,
                key: Some(1)
            }
        );
        assert!(stats.most_denied.is_empty());
    }

    #[test]
    fn most_denied_keys_come_first_and_ties_keep_trace_order() {
        let most_denied = |counts: &[u64], n| most_denied(counts.iter().copied().enumerate(), n);
        assert_eq!(most_denied(&[], 3), []);
        assert_eq!(most_denied(&[0, 0], 3), []);
        assert_eq!(most_denied(&[2, 5, 0, 5, 1, 2], 3), [(1, 5), (3, 5), (0, 2)]);
        assert_eq!(most_denied(&[1, 4], 3), [(1, 4), (0, 1)]);
    }

    #[test]
    fn ties_go_to_the_key_this_tally_saw_first() {
        let trace = crate::trace::csv::parse("time,key\n0,a\n0,b\n".as_bytes()).unwrap();
        let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(1)).unwrap();
        let mut tally = Tally::new(2, policy, &Settings::default());
        let decision = |allowed| Decision::new(allowed, 1, 0, Duration::ZERO, None);
        // b comes first here, though a comes first in the trace.
        tally.record(&trace.requests[1], &decision(false), Duration::ZERO);
        tally.record(&trace.requests[0], &decision(false), Duration::ZERO);
        tally.record(&trace.requests[1], &decision(true), Duration::ZERO);
        tally.record(&trace.requests[0], &decision(true), Duration::ZERO);
        let stats = tally.finish("t");
        assert_eq!(stats.most_denied, [(1, 1), (0, 1)]);
        assert_eq!(
            stats.peak,
            Peak {
                units: 1,
                key: Some(1)
            }
        );
        assert_eq!((stats.requests, stats.admitted, stats.keys), (4, 2, 2));
    }

    #[test]
    fn replay_counts_denied_requests_per_key() {
        let trace =
            crate::trace::csv::parse("time,key\n0,a\n0,b\n0,b\n0,b\n0,a\n0,c\n0,c\n".as_bytes()).unwrap();
        let limit = Limit::new(Strategy::FixedWindow, 1, Duration::from_secs(1)).unwrap();
        let stats = replay(&trace, &Targets::one(limit), |_, _, _| {
            Ok::<_, tollgate::Error>(())
        })
        .unwrap()
        .remove(0);
        assert_eq!((stats.admitted, stats.denied), (3, 4));
        assert_eq!(stats.most_denied, [(1, 2), (0, 1), (2, 1)]);
    }

    #[test]
    fn replay_stops_at_the_first_sink_error() {
        #[derive(Debug)]
        enum E {
            Sink,
            Lib,
        }
        impl From<tollgate::Error> for E {
            fn from(_: tollgate::Error) -> Self {
                E::Lib
            }
        }
        let trace = crate::trace::csv::parse("time,key\n0,a\n1,a\n".as_bytes()).unwrap();
        let limit = Limit::new(Strategy::TokenBucket, 1, Duration::from_secs(1)).unwrap();
        let mut calls = 0;
        let result = replay(&trace, &Targets::one(limit), |_, _, _| {
            calls += 1;
            Err(E::Sink)
        });
        assert!(matches!(result, Err(E::Sink)));
        assert_eq!(calls, 1);
    }
}
