//! Limits chosen per request: a tenant's plan looked up per request (a JWT
//! claim, a billing lookup), an Envoy descriptor's `limit`, `POST
//! /v1/decide`'s `"limit"` with `"window_ms"` or `"calendar"`, decided
//! with one base policy's strategy and settings, without a limiter per
//! tenant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::backend::memory::MemoryBackend;
use crate::backend::Backend;
use crate::calendar::Calendar;
use crate::error::{ConfigError, Error};
use crate::limiter::{Limiter, LimiterBuilder};
use crate::policy::{Limit, Policy};
use crate::strategy::Strategy;

/// The limiters of one base policy under limits chosen per request.
///
/// A request names a limit, and optionally a window (or a calendar,
/// [`calendar_limiter`]); [`limiter`] answers
/// the limiter that decides it with the base policy's strategy, settings,
/// store and key prefix. Limiters are made per distinct limit and window
/// (a *plan*), never per key, and kept up to a capacity, so memory is
/// bounded whatever limits requests name.
///
/// **Whose state.** A key's state is kept per window, not per limit: under
/// the base policy's window it is the base limiter's own state, so a key
/// decided with and without an override counts against one state, and a
/// changed limit applies to what the key has spent (a fixed or sliding
/// window keeps its count, so a lowered limit may leave nothing; a bucket
/// keeps its level in time, the share of the window it has used). Under
/// another window the state is the window's own (its resource is the base
/// one followed by `@` and the window in milliseconds): a key whose window
/// changes starts afresh in the new one, as [`Limiters::replace`] starts a
/// changed window afresh.
///
/// **What a plan's limiter keeps.** Each plan's limiter has the base
/// builder's settings but its own protection of a shared store: its deny
/// cache (a denial under one limit is not another's) and its leases (a
/// process may lease a key's units under each plan it decides the key
/// with: under-admission only, as the leases' bounds say).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, Overrides, Policy, Strategy};
///
/// let base = Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(60))?;
/// let plans = Overrides::new(Limiter::builder().policy(base))?.ceiling(10_000);
/// // A tenant on the "pro" plan: 1,000 a minute, the base policy's window.
/// let pro = plans.limiter(1_000, None)?;
/// assert_eq!(pro.check("tenant-7").remaining, 999);
/// // The same key under the base limit counts the same state.
/// assert_eq!(plans.base().check("tenant-7").remaining, 98);
/// // Above the ceiling: refused, naming the field.
/// assert!(plans.limiter(20_000, None).is_err());
/// # Ok::<(), tollgate::Error>(())
/// ```
///
/// [`limiter`]: Self::limiter
/// [`calendar_limiter`]: Self::calendar_limiter
/// [`Limiters::replace`]: crate::Limiters::replace
pub struct Overrides<B: Backend = MemoryBackend> {
    builder: LimiterBuilder<B>,
    base: Arc<Limiter<B>>,
    ceiling: u64,
    capacity: usize,
    kept: Mutex<Kept<B>>,
}

/// The limiters made so far.
struct Kept<B: Backend> {
    /// Under a window or calendar other than the base one: the limiter
    /// whose state the span's plans share, by span.
    windows: HashMap<Span, Arc<Limiter<B>>>,
    /// By limit and span.
    plans: HashMap<(u64, Span), Arc<Limiter<B>>>,
}

/// What a limit chosen per request counts in: a window, or a calendar's
/// periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Span {
    Window(Duration),
    Calendar(Calendar),
}

impl<B: Backend> std::fmt::Debug for Overrides<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Overrides")
            .field("base", &self.base.policy())
            .field("ceiling", &self.ceiling)
            .field("capacity", &self.capacity)
            .field("plans", &kept.plans.len())
            .field("windows", &kept.windows.len())
            .finish()
    }
}

impl Overrides {
    /// The most plans kept by default: limiters are made again when more
    /// are named, and at most this many windows besides the base one are
    /// served.
    pub const DEFAULT_CAPACITY: usize = 1_024;
}

impl<B: Backend + Clone> Overrides<B> {
    /// Overrides of the policy `builder` builds (one limit: the one a
    /// request's limit replaces), with `builder`'s settings, store, key
    /// prefix and resource; the base limiter is built here. The ceiling is
    /// [`Policy::MAX_LIMIT`] and the capacity
    /// [`DEFAULT_CAPACITY`](Overrides::DEFAULT_CAPACITY) until set.
    ///
    /// # Errors
    ///
    /// As for [`LimiterBuilder::build`]; [`Error::Config`] naming `policy`
    /// for a compound policy, whose several limits a request's one limit
    /// cannot replace.
    pub fn new(builder: LimiterBuilder<B>) -> Result<Self, Error> {
        let base = Arc::new(builder.clone().build()?);
        Self::over(base, builder)
    }

    /// Overrides of `base`, a limiter that `builder` built (or one built as
    /// `builder` builds: the same store, key prefix, resource and
    /// settings), sharing its state: a service's limiter of a resource and
    /// the overrides of that resource count one state per key.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `policy` when `base`'s policy is compound.
    pub fn over(base: Arc<Limiter<B>>, builder: LimiterBuilder<B>) -> Result<Self, Error> {
        if base.policy().single().is_none() {
            return Err(ConfigError::new(
                "policy",
                "has several limits: a limit chosen per request replaces the one limit of a policy",
            )
            .into());
        }
        Ok(Self {
            builder,
            base,
            ceiling: Policy::MAX_LIMIT,
            capacity: Overrides::DEFAULT_CAPACITY,
            kept: Mutex::new(Kept {
                windows: HashMap::new(),
                plans: HashMap::new(),
            }),
        })
    }

    /// The largest limit a request may name (at most
    /// [`Policy::MAX_LIMIT`]): a higher one is refused with an error that
    /// says so.
    #[must_use]
    pub fn ceiling(mut self, max_limit: u64) -> Self {
        self.ceiling = max_limit.min(Policy::MAX_LIMIT);
        self
    }

    /// How many plans (distinct limits and windows) are kept (at least
    /// 1), and how many windows besides the base one are served: a plan
    /// past the capacity makes the kept plans be made again on their next
    /// use (their state is the window's, and stays), a window past it is
    /// refused.
    #[must_use]
    pub fn capacity(mut self, plans: usize) -> Self {
        self.capacity = plans.max(1);
        self
    }

    /// The limiter of the base policy.
    pub fn base(&self) -> &Arc<Limiter<B>> {
        &self.base
    }

    /// How many plans (distinct limits and windows) are kept now: at most
    /// the [capacity](Self::capacity).
    pub fn plans_kept(&self) -> usize {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .plans
            .len()
    }

    /// Every limiter made so far besides the base one (the windows' and
    /// the plans kept), as a service ends their leases before it exits
    /// ([`together::end_all_leases`](crate::together::end_all_leases)).
    pub fn limiters(&self) -> Vec<Arc<Limiter<B>>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.windows
            .values()
            .chain(kept.plans.values())
            .cloned()
            .collect()
    }

    /// The largest limit a request may name.
    pub fn max_limit(&self) -> u64 {
        self.ceiling
    }

    /// The limiter that decides a request naming `limit` per `window`
    /// (the base policy's window when `None`), with the base policy's
    /// strategy and settings.
    ///
    /// A limit of 0 admits nothing ([`Policy::zero`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `limit` when it is above the
    /// [ceiling](Self::ceiling), `window` when the policy refuses it (see
    /// [`Policy::new`]) or when the capacity's worth of windows is already
    /// served; as for [`LimiterBuilder::build`] when the store refuses the
    /// limiter.
    pub fn limiter(&self, limit: u64, window: Option<Duration>) -> Result<Arc<Limiter<B>>, Error> {
        let base = self.base_span();
        let span = match window {
            None => base,
            // The window of a calendar policy names its own periods.
            Some(window) if window == self.base_limit().window() => base,
            Some(window) => Span::Window(window),
        };
        self.plan(limit, span)
    }

    /// The limiter that decides a request naming `limit` per period of
    /// `calendar` (a tenant's monthly quota from its billing day), with
    /// the base policy's settings. Its state is the calendar's own, as a
    /// window's is (the base one's when the base policy counts in the
    /// same calendar).
    ///
    /// # Errors
    ///
    /// As [`limiter`](Self::limiter), and [`Error::Config`] naming
    /// `calendar` when the base policy's strategy is not a fixed window
    /// (a calendar's periods are a fixed window's windows) or when the
    /// capacity's worth of windows and calendars is already served.
    pub fn calendar_limiter(&self, limit: u64, calendar: Calendar) -> Result<Arc<Limiter<B>>, Error> {
        let strategy = self.base_limit().strategy();
        if strategy != Strategy::FixedWindow {
            return Err(ConfigError::new(
                "calendar",
                format!(
                    "counts in a fixed window's windows, and this policy's strategy is {}",
                    strategy.name()
                ),
            )
            .into());
        }
        self.plan(limit, Span::Calendar(calendar))
    }

    /// The base policy's (first) limit.
    fn base_limit(&self) -> Limit {
        *self.base.policy().limits().first().expect("a policy has a limit")
    }

    /// What the base policy counts in.
    fn base_span(&self) -> Span {
        let base = self.base_limit();
        match base.calendar() {
            Some(calendar) => Span::Calendar(calendar),
            None => Span::Window(base.window()),
        }
    }

    /// The limiter of `limit` per `span`.
    fn plan(&self, limit: u64, span: Span) -> Result<Arc<Limiter<B>>, Error> {
        let base_limit = self.base_limit();
        if limit > self.ceiling {
            return Err(ConfigError::new(
                "limit",
                format!(
                    "{limit} is above {}, the largest limit a request may name here",
                    self.ceiling
                ),
            )
            .into());
        }
        let base_span = self.base_span();
        if limit == base_limit.limit() && span == base_span {
            return Ok(Arc::clone(&self.base));
        }
        // Envoy's `requests_per_unit: 0`: every request over the limit.
        let policy = match (limit, span) {
            (0, Span::Window(window)) => Policy::zero(window)?,
            (0, Span::Calendar(calendar)) => Policy::zero(calendar.period().longest())?,
            (_, Span::Calendar(calendar)) => Limit::per_calendar(limit, calendar)?.into(),
            (_, Span::Window(window)) => Policy::new(base_limit.strategy(), limit, window)?,
        };
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(plan) = kept.plans.get(&(limit, span)) {
            return Ok(Arc::clone(plan));
        }
        let (resource, shares) = if span == base_span {
            (self.builder_resource().to_owned(), Arc::clone(&self.base))
        } else {
            let resource = match span {
                Span::Window(window) => format!("{}@{}ms", self.builder_resource(), window.as_millis()),
                Span::Calendar(calendar) => format!("{}@{}", self.builder_resource(), calendar.label()),
            };
            let shares = match kept.windows.get(&span) {
                Some(shares) => Arc::clone(shares),
                None => {
                    if kept.windows.len() >= self.capacity {
                        let (field, what) = match span {
                            Span::Window(window) => {
                                ("window", format!("a window of {} ms", window.as_millis()))
                            }
                            Span::Calendar(calendar) => ("calendar", format!("the calendar {calendar}")),
                        };
                        return Err(ConfigError::new(
                            field,
                            format!(
                                "{} windows and calendars besides the policy's own are already served, \
                                 the most these overrides keep; {what} is refused",
                                kept.windows.len(),
                            ),
                        )
                        .into());
                    }
                    let first = Arc::new(self.plan_builder(policy, &resource).build()?);
                    kept.windows.insert(span, Arc::clone(&first));
                    first
                }
            };
            (resource, shares)
        };
        let plan = if shares.policy() == &policy {
            shares
        } else {
            Arc::new(self.plan_builder(policy, &resource).build_from(&shares)?)
        };
        if kept.plans.len() >= self.capacity {
            // Their state is their window's, which stays: they are made
            // again when named.
            kept.plans.clear();
        }
        kept.plans.insert((limit, span), Arc::clone(&plan));
        Ok(plan)
    }

    /// The base builder's resource.
    fn builder_resource(&self) -> &str {
        self.builder.resource_name()
    }

    /// A builder of a plan's limiter: the base one's settings, `policy`,
    /// under `resource`, counted in the base limiter's metrics.
    fn plan_builder(&self, policy: Policy, resource: &str) -> LimiterBuilder<B> {
        self.builder
            .clone()
            .replacing_policy(policy, resource)
            .share_metrics(&self.base)
    }
}
