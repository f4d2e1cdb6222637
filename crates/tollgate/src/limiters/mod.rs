//! [`Limiters`]: a default policy and named per-resource policies, whose
//! policies can be replaced while they serve.

mod builder;
mod names;
mod resource;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

pub use builder::LimitersBuilder;
pub use resource::Resource;

use crate::backend::memory::MemoryBackend;
use crate::backend::Backend;
use crate::error::Error;
use crate::limiter::Limiter;
use crate::policy::Policy;

/// A set of limiters: a default policy and named per-resource policies,
/// each a [`Limiter`], whose policies can be replaced while it serves.
///
/// The state of different resources never collides, even for equal keys.
/// A caller takes a resource's limiter (its own, or the default one) and
/// decides with the [`Limiter`]'s methods:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiters, Policy, Strategy};
///
/// let limiters = Limiters::builder()
///     .default_policy(Policy::new(Strategy::SlidingWindow, 100, Duration::from_secs(60))?)
///     .resource("login", Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60))?)
///     .build()?;
/// assert_eq!(limiters.limiter("login").check("alice").remaining, 4);
/// assert_eq!(limiters.limiter("search").check("alice").remaining, 99);
/// # Ok::<(), tollgate::Error>(())
/// ```
///
/// # Replacing the policies
///
/// [`replace`](Self::replace) builds the new limiters from a builder,
/// keeping state where the policies allow it, and swaps them in atomically:
/// every decision is made wholly under the old policies or wholly under the
/// new ones (a limiter taken with [`limiter`](Self::limiter) keeps deciding
/// under the policy it was taken under). A key keeps its state when its
/// resource's strategy and window stay the same and only its limit
/// changes: a fixed or sliding window keeps the units spent (a raised limit
/// admits the difference), a token or leaky bucket keeps its level in time
/// (`tat`: a bucket half empty under the old limit is half empty under the
/// new one). A changed strategy or window starts fresh, because state kept
/// under one window has no exact meaning under another (a fixed window's
/// buckets realign, a sliding window's counters weigh by `W`, a bucket's
/// `tat` spaces requests by `W / L`). When the new configuration is
/// invalid, nothing changes and the error says why.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiters, Policy, Strategy};
///
/// let per_minute = |limit| Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(60));
/// let limiters = Limiters::builder().default_policy(per_minute(2)?).build()?;
/// assert!(limiters.limiter("").check("k").allowed);
/// assert!(limiters.limiter("").check("k").allowed);
/// assert!(!limiters.limiter("").check("k").allowed);
/// // Raise the limit: the key keeps the two units it spent.
/// limiters.replace(Limiters::builder().default_policy(per_minute(3)?))?;
/// assert!(limiters.limiter("").check("k").allowed);
/// assert!(!limiters.limiter("").check("k").allowed);
/// # Ok::<(), tollgate::Error>(())
/// ```
pub struct Limiters<B: Backend = MemoryBackend> {
    current: ArcSwap<Named<B>>,
    /// Serialises replacements, so each builds from the one before.
    replacing: Mutex<()>,
    /// Whether a set that may still be read names a resource: set before
    /// such a set is stored, cleared after one without is, so that a
    /// caller that reads it first never misses a resource's policy.
    has_resources: AtomicBool,
    /// Whether every set that may still be read decides now: cleared
    /// before a set that does not is stored, set after one that does.
    decides_now: AtomicBool,
}

/// The limiters a set serves at one time.
pub(crate) struct Named<B: Backend> {
    default: Arc<Limiter<B>>,
    resources: HashMap<Box<str>, Arc<Limiter<B>>>,
    /// The concurrency limiters of the resources that combine rates with
    /// one ([`Resource::in_flight`]), by name.
    in_flight: HashMap<Box<str>, Arc<Limiter<B>>>,
    /// The key prefix the limiters were built with; `None` for a set made
    /// from a single limiter, whose prefix is not known here (a
    /// replacement then keeps no state).
    prefix: Option<String>,
}

impl<B: Backend> Named<B> {
    /// The limiter of `resource`, or the default one.
    #[inline]
    fn get(&self, resource: &str) -> &Arc<Limiter<B>> {
        if resource.is_empty() || self.resources.is_empty() {
            return &self.default;
        }
        self.resources.get(resource).unwrap_or(&self.default)
    }

    /// The concurrency limiter `resource` combines with its rates, if any.
    #[inline]
    fn in_flight(&self, resource: &str) -> Option<&Arc<Limiter<B>>> {
        if self.in_flight.is_empty() {
            return None;
        }
        self.in_flight.get(resource)
    }
}

impl<B: Backend> std::fmt::Debug for Limiters<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current.load();
        f.debug_struct("Limiters")
            .field("default", &current.default)
            .field("resources", &current.resources)
            .field("in_flight", &current.in_flight)
            .finish()
    }
}

/// A set that serves the same limiters as this one, with their state,
/// until either is replaced ([`Limiters::replace`]); replacing one leaves
/// the other as it was.
impl<B: Backend> Clone for Limiters<B> {
    fn clone(&self) -> Self {
        Self::sharing(self.current.load_full())
    }
}

impl Limiters {
    /// A builder of a set in memory; switch stores with
    /// [`LimitersBuilder::backend`].
    pub fn builder() -> LimitersBuilder<MemoryBackend> {
        LimitersBuilder::new()
    }
}

impl<B: Backend> Limiters<B> {
    /// Serves `named` until it is replaced.
    pub(super) fn serving(named: Named<B>) -> Self {
        Self::sharing(Arc::new(named))
    }

    /// Serves `named`, shared with its other owners, until it is replaced.
    fn sharing(named: Arc<Named<B>>) -> Self {
        Self {
            has_resources: AtomicBool::new(!named.resources.is_empty()),
            decides_now: AtomicBool::new(named.default.decides_now()),
            current: ArcSwap::new(named),
            replacing: Mutex::new(()),
        }
    }

    /// Serves `next` from now on. The caller holds `replacing`.
    fn store(&self, next: Arc<Named<B>>) {
        let has_resources = !next.resources.is_empty();
        let decides_now = next.default.decides_now();
        if has_resources {
            self.has_resources.store(true, Ordering::Release);
        }
        if !decides_now {
            self.decides_now.store(false, Ordering::Release);
        }
        self.current.store(next);
        if !has_resources {
            self.has_resources.store(false, Ordering::Release);
        }
        if decides_now {
            self.decides_now.store(true, Ordering::Release);
        }
    }

    /// Whether any resource has a policy of its own. When none has, every
    /// name is served by the default policy, and a caller need not take a
    /// resource from its requests (the HTTP middleware then skips its
    /// resource extractor). While a replacement adds or removes resources,
    /// it answers `true`.
    #[inline]
    pub fn has_resources(&self) -> bool {
        self.has_resources.load(Ordering::Acquire)
    }

    /// Whether every limiter of the set decides now
    /// ([`Limiter::decides_now`]: they share one backend), so that
    /// [`Limiter::decide_now`] answers at once on any of them. While a
    /// replacement changes the answer, it answers `false`.
    #[inline]
    pub fn decides_now(&self) -> bool {
        self.decides_now.load(Ordering::Acquire)
    }

    /// The limiter serving `resource` now: its own, or the default one
    /// (the empty name, or any name without a policy of its own). Later
    /// replacements do not change it, so everything done through it is
    /// done wholly under the policy it was taken under.
    pub fn limiter(&self, resource: &str) -> Arc<Limiter<B>> {
        Arc::clone(self.current.load().get(resource))
    }

    /// The concurrency limiter of `resource` when the resource combines
    /// its rates with one ([`Resource::in_flight`]): it acquires the
    /// permits the resource's requests hold while they run, and
    /// [`limiter`](Self::limiter) decides their rates. `None` for any
    /// other resource (a policy that is a concurrency limit alone is the
    /// resource's own limiter).
    pub fn in_flight(&self, resource: &str) -> Option<Arc<Limiter<B>>> {
        self.current.load().in_flight(resource).cloned()
    }

    /// [`limiter`](Self::limiter) and [`in_flight`](Self::in_flight) of
    /// `resource`, taken together, so that a replacement between them
    /// cannot pair one policy's rates with another's concurrency limit.
    pub fn limiters_of(&self, resource: &str) -> (Arc<Limiter<B>>, Option<Arc<Limiter<B>>>) {
        let current = self.current.load();
        (
            Arc::clone(current.get(resource)),
            current.in_flight(resource).cloned(),
        )
    }

    /// Runs `f` on the limiter serving `resource` now, without taking a
    /// reference count on it: for a decision made at once on a hot
    /// resource, where threads would otherwise contend on the count.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiters, Policy, Strategy};
    ///
    /// let limiters = Limiters::builder()
    ///     .default_policy(Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(60))?)
    ///     .build()?;
    /// assert!(limiters.with_limiter("", |limiter| limiter.check("k").allowed));
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    #[inline]
    pub fn with_limiter<R>(&self, resource: &str, f: impl FnOnce(&Limiter<B>) -> R) -> R {
        f(self.current.load().get(resource))
    }

    /// The policy serving `resource` now and its name: the resource's own
    /// name when it has a policy of its own, [`Limiters::DEFAULT_POLICY_NAME`]
    /// (`default`) otherwise. A replacement between a decision and this
    /// call makes it another policy than the decision's.
    pub fn named_policy<'a>(&self, resource: &'a str) -> (&'a str, Policy) {
        let current = self.current.load();
        let limiter = current.get(resource);
        let name = if Arc::ptr_eq(limiter, &current.default) {
            Limiters::DEFAULT_POLICY_NAME
        } else {
            resource
        };
        (name, *limiter.policy())
    }

    /// The named resources serving now and their limiters, by name (the
    /// default limiter is [`limiter("")`](Self::limiter)).
    pub fn resources(&self) -> Vec<(Box<str>, Arc<Limiter<B>>)> {
        let current = self.current.load();
        let mut resources: Vec<_> = current
            .resources
            .iter()
            .map(|(name, limiter)| (name.clone(), Arc::clone(limiter)))
            .collect();
        resources.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        resources
    }

    /// Builds limiters from `builder`, keeping state as described
    /// [above](Self#replacing-the-policies), and serves them from now on.
    ///
    /// # Errors
    ///
    /// The builder's error when the new configuration is invalid; the
    /// limiters serving now keep serving.
    pub fn replace(&self, builder: LimitersBuilder<B>) -> Result<(), Error> {
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(PoisonError::into_inner);
        let next = builder.build_after(Some(&self.current()))?;
        self.store(Arc::new(next));
        Ok(())
    }

    /// The limiters serving now.
    pub(super) fn current(&self) -> arc_swap::Guard<Arc<Named<B>>> {
        self.current.load()
    }

    /// Serves from now on what `other` serves now, shared with it (the
    /// same limiters and state); for a set kept up to date with sets built
    /// elsewhere, such as the policies of a `tollgate_config::PolicySet`.
    pub fn serve_as(&self, other: &Limiters<B>) {
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(PoisonError::into_inner);
        self.store(other.current.load_full());
    }

    /// Ends the leases of every limiter (the default policy's and each
    /// resource's) and gives their unspent units back, as
    /// [`Limiter::end_leases`] does, as a service does before it exits.
    /// Returns the units given back.
    ///
    /// # Errors
    ///
    /// The first limiter's error, after every limiter was tried.
    pub async fn end_leases(&self) -> Result<u64, Error> {
        let current = self.current.load_full();
        let limiters = std::iter::once(&current.default).chain(current.resources.values());
        crate::limiter::together::end_all_leases(limiters.map(Arc::as_ref)).await
    }
}

/// A set of one limiter, the default: for code that takes a set (the HTTP
/// middleware, a service of your own) given a single policy. Its
/// [`replace`](Limiters::replace) keeps no state, as the limiter's key
/// prefix is not known to it: build a set with [`Limiters::builder`] to
/// replace its policies at run time.
impl<B: Backend> From<Limiter<B>> for Limiters<B> {
    fn from(limiter: Limiter<B>) -> Self {
        Self::serving(Named {
            default: Arc::new(limiter),
            resources: HashMap::new(),
            in_flight: HashMap::new(),
            prefix: None,
        })
    }
}

/// [`Limiters::from`] a limiter, shared.
impl<B: Backend> From<Limiter<B>> for Arc<Limiters<B>> {
    fn from(limiter: Limiter<B>) -> Self {
        Arc::new(Limiters::from(limiter))
    }
}
