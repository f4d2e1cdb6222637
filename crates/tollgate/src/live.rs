//! Policies replaced at run time, without losing state.

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use crate::backend::memory::MemoryBackend;
use crate::backend::Backend;
use crate::error::Error;
use crate::limiter::Limiter;
use crate::resources::{ResourceLimiter, ResourceLimiterBuilder};

/// A [`ResourceLimiter`] whose policies can be replaced while it serves.
///
/// [`replace`](Self::replace) builds the new limiter from a builder with
/// [`ResourceLimiterBuilder::build_from`], so state is kept where the
/// policies allow it, and swaps it in atomically: every decision is made
/// wholly under the old policies or wholly under the new ones. A key keeps
/// its state when its resource's strategy and window stay the same and only
/// its limit changes: a fixed or sliding window keeps the units spent (a
/// raised limit admits the difference), a token or leaky bucket keeps its
/// level in time (`tat`: a bucket half empty under the old limit is half
/// empty under the new one). A changed strategy or window starts fresh, because
/// state kept under one window has no exact meaning under another (a fixed
/// window's buckets realign, a sliding window's counters weigh by `W`, a
/// bucket's `tat` spaces requests by `W / L`). When the new configuration is
/// invalid, nothing changes and the error says why.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{LiveLimiter, Policy, ResourceLimiter, Strategy};
///
/// let per_minute = |limit| Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(60));
/// let live = LiveLimiter::new(ResourceLimiter::builder().default_policy(per_minute(2)?).build()?);
/// assert!(live.limiter("").check("k").allowed);
/// assert!(live.limiter("").check("k").allowed);
/// assert!(!live.limiter("").check("k").allowed);
/// // Raise the limit: the key keeps the two units it spent.
/// live.replace(ResourceLimiter::builder().default_policy(per_minute(3)?))?;
/// assert!(live.limiter("").check("k").allowed);
/// assert!(!live.limiter("").check("k").allowed);
/// # Ok::<(), tollgate::Error>(())
/// ```
pub struct LiveLimiter<B: Backend = MemoryBackend> {
    current: ArcSwap<ResourceLimiter<B>>,
    /// Serialises replacements, so each builds from the one before.
    replacing: Mutex<()>,
}

impl<B: Backend> std::fmt::Debug for LiveLimiter<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLimiter")
            .field("current", &*self.current.load())
            .finish()
    }
}

impl<B: Backend> LiveLimiter<B> {
    /// Serves `limiter` until it is replaced.
    pub fn new(limiter: ResourceLimiter<B>) -> Self {
        Self {
            current: ArcSwap::from_pointee(limiter),
            replacing: Mutex::new(()),
        }
    }

    /// The limiter serving now; later replacements do not change it.
    pub fn current(&self) -> Arc<ResourceLimiter<B>> {
        self.current.load_full()
    }

    /// Runs `f` on the limiter serving now, without taking a reference
    /// count on it.
    #[inline]
    pub(crate) fn with_current<R>(&self, f: impl FnOnce(&ResourceLimiter<B>) -> R) -> R {
        f(&self.held())
    }

    /// The limiter serving now, held without a reference count (a
    /// decision on a hot resource would otherwise contend on one), for a
    /// call that must await.
    #[inline]
    pub(crate) fn held(&self) -> arc_swap::Guard<Arc<ResourceLimiter<B>>> {
        self.current.load()
    }

    /// Builds a limiter from `builder`, keeping state as
    /// [`ResourceLimiterBuilder::build_from`] does, and serves it from now
    /// on.
    ///
    /// # Errors
    ///
    /// The builder's error when the new configuration is invalid; the
    /// current limiter then keeps serving.
    pub fn replace(&self, builder: ResourceLimiterBuilder<B>) -> Result<(), Error> {
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(PoisonError::into_inner);
        let next = builder.build_from(&self.current.load())?;
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// Serves `limiter` from now on, as it is: state is kept only as far as
    /// it was built to keep it (with [`ResourceLimiterBuilder::build_from`]
    /// the [`current`](Self::current) limiter). For a limiter built
    /// elsewhere and shared, such as the policies of a
    /// `tollgate_config::PolicySet`; [`replace`](Self::replace) builds and
    /// stores in one step.
    pub fn store(&self, limiter: Arc<ResourceLimiter<B>>) {
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(PoisonError::into_inner);
        self.current.store(limiter);
    }

    /// Serves `limiter`, shared with its other owners, until it is
    /// replaced.
    pub fn from_shared(limiter: Arc<ResourceLimiter<B>>) -> Self {
        Self {
            current: ArcSwap::new(limiter),
            replacing: Mutex::new(()),
        }
    }

    /// The limiter serving `resource` now (its own, or the default one),
    /// on which a caller decides and applies operations with the methods of
    /// [`Limiter`]; later replacements do not change it, so everything done
    /// through it is done wholly under the policies it was taken under.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{LiveLimiter, Policy, ResourceLimiter, Strategy};
    ///
    /// let per_minute = |limit| Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(60));
    /// let live = LiveLimiter::new(
    ///     ResourceLimiter::builder()
    ///         .default_policy(per_minute(100)?)
    ///         .resource("login", per_minute(1)?)
    ///         .build()?,
    /// );
    /// assert!(live.limiter("login").check("alice").allowed);
    /// assert!(!live.limiter("login").check("alice").allowed);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn limiter(&self, resource: &str) -> ServingLimiter<B> {
        ServingLimiter(Arc::clone(self.current.load().shared_limiter(resource)))
    }
}

impl LiveLimiter<MemoryBackend> {}

/// The limiter serving one resource of a [`LiveLimiter`], as it was when
/// [`LiveLimiter::limiter`] took it: a shared reference to a [`Limiter`],
/// whose methods it gives (it dereferences to it), kept alive by it after
/// the live limiter's policies are replaced.
pub struct ServingLimiter<B: Backend = MemoryBackend>(Arc<Limiter<B>>);

impl<B: Backend> std::ops::Deref for ServingLimiter<B> {
    type Target = Limiter<B>;

    fn deref(&self) -> &Limiter<B> {
        &self.0
    }
}

impl<B: Backend> std::fmt::Debug for ServingLimiter<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ServingLimiter").field(&*self.0).finish()
    }
}
