//! The setters of the [`Options`](super::Options) every builder shares:
//! [`LimiterBuilder`](crate::LimiterBuilder) and
//! [`LimitersBuilder`](crate::LimitersBuilder) set the fail
//! policy, the protection of a remote store, shadow mode, the key lists and
//! the key prefix alike.

/// The opening words of the setters a
/// [`LimitersBuilder`](crate::LimitersBuilder) can override per
/// resource, by builder: [`option_setters`] follows them with what both
/// builders' setters share.
macro_rules! summary {
    (LimiterBuilder, fallback) => {
        "The in-memory policy that decides while the store fails."
    };
    (LimitersBuilder, fallback) => {
        "The in-memory fallback policy of every resource without one of its own \
         ([`Resource::fallback`](crate::Resource::fallback)), and of the default policy."
    };
    (LimiterBuilder, deny_cache) => {
        "A local cache of the keys the store denied."
    };
    (LimitersBuilder, deny_cache) => {
        "A deny cache for every resource unless turned off per resource \
         ([`Resource::deny_cache`](crate::Resource::deny_cache)), and for the default policy."
    };
    (LimiterBuilder, lease) => {
        "Leases of hot keys' units from a shared store (default: off)."
    };
    (LimitersBuilder, lease) => {
        "Leases for every resource without a setting of its own \
         ([`Resource::lease`](crate::Resource::lease)), and for the default policy."
    };
    (LimiterBuilder, shadow) => {
        "Shadow mode, on or off (default: off)."
    };
    (LimitersBuilder, shadow) => {
        "Shadow mode for every resource without a setting of its own \
         ([`Resource::shadow`](crate::Resource::shadow)), and for the default policy."
    };
    (LimiterBuilder, top_keys) => {
        "Keeps the keys with the most denied requests, admitted units and shadow-denied \
         requests over the last minute (default: off)."
    };
    (LimitersBuilder, top_keys) => {
        "Top keys for every resource without a setting of its own \
         ([`Resource::top_keys`](crate::Resource::top_keys)), and for the default policy."
    };
    (LimiterBuilder, charge) => {
        "What a request is charged (default: [`Charge::Admitted`](crate::Charge::Admitted))."
    };
    (LimitersBuilder, charge) => {
        "What a request is charged under every resource without a setting of its own \
         ([`Resource::charge`](crate::Resource::charge)), and under the default policy."
    };
    (LimiterBuilder, exempt) => {
        "Keys exempt from the limit."
    };
    (LimitersBuilder, exempt) => {
        "Keys exempt under every resource and the default policy; a resource may exempt more \
         ([`Resource::exempt`](crate::Resource::exempt))."
    };
    (LimiterBuilder, deny) => {
        "Keys denied whatever the limit."
    };
    (LimitersBuilder, deny) => {
        "Keys denied under every resource and the default policy; a resource may deny more \
         ([`Resource::deny`](crate::Resource::deny))."
    };
}

/// Defines, inside the `impl` block of the builder `$builder`
/// (`LimiterBuilder` or `LimitersBuilder`), the setters of its
/// `options` (an [`Options`](super::Options)) and of its key `prefix` (a
/// `String`). The settings a resource can override open with the builder's
/// own words ([`summary`]).
macro_rules! option_setters {
    ($builder:ident) => {
        /// What to do when the backend fails (default: fail closed).
        pub fn fail_policy(mut self, fail: $crate::FailPolicy) -> Self {
            self.options.fail = fail;
            self
        }

        #[doc = $crate::limiter::summary!($builder, fallback)]
        ///
        /// Sets the fail policy to
        /// [`FailPolicy::Fallback`](crate::FailPolicy::Fallback): an
        /// in-memory limiter of `policy` decides the requests the store
        /// cannot.
        pub fn fallback(mut self, policy: $crate::Policy) -> Self {
            self.options.fallback = Some(policy);
            self.options.fail = $crate::FailPolicy::Fallback;
            self
        }

        #[doc = $crate::limiter::summary!($builder, deny_cache)]
        ///
        /// The cache answers the keys the store denied until their
        /// `retry_after` runs out (see [`DenyCache`](crate::protection::DenyCache)).
        pub fn deny_cache(mut self, cache: $crate::protection::DenyCache) -> Self {
            self.options.deny_cache = Some(cache);
            self
        }

        /// Stops calling a failing store for a while (see
        /// [`CircuitBreaker`](crate::protection::CircuitBreaker)); on by default under
        /// [`FailPolicy::Fallback`](crate::FailPolicy::Fallback), off
        /// otherwise.
        pub fn circuit_breaker(mut self, breaker: $crate::protection::CircuitBreaker) -> Self {
            self.options.breaker = Some(breaker);
            self
        }

        #[doc = $crate::limiter::summary!($builder, lease)]
        ///
        /// A request that finds no lease of its key takes up to
        /// `max_units` units from the store in one call; the key's next
        /// requests in this process are admitted from them without a round
        /// trip, within exact bounds (see [`Lease`](crate::protection::Lease)). Only
        /// backends on a shared store lease; in memory the setting changes
        /// nothing.
        pub fn lease(mut self, lease: $crate::protection::Lease) -> Self {
            self.options.lease = Some(lease);
            self
        }

        /// Spreads awaited admissions' retries: a waiter that a fixed
        /// window, or a sliding window's spoken-for window, refused waits
        /// its `retry_after` plus a random extra of up to `max` before it
        /// asks again (default: none), so that the processes of a fleet
        /// waiting on one key do not all ask the store at the instant the
        /// window turns. A reservation's wait is never lengthened (its slot
        /// is already its own), and the extra never carries a waiter past
        /// its deadline. At most [`MAX_JITTER`](crate::Limiter::MAX_JITTER) (one
        /// hour), checked when the limiter is built (field
        /// `acquire_jitter`).
        pub fn acquire_jitter(mut self, max: std::time::Duration) -> Self {
            self.options.jitter = max;
            self
        }

        #[doc = $crate::limiter::summary!($builder, shadow)]
        ///
        /// In shadow mode decisions are made and state kept as if enforced,
        /// but every request is allowed, and those enforcement would deny
        /// are marked
        /// ([`Decision::shadow_denied`](crate::Decision::shadow_denied)).
        pub fn shadow(mut self, shadow: bool) -> Self {
            self.options.shadow = shadow;
            self
        }

        #[doc = $crate::limiter::summary!($builder, charge)]
        ///
        /// Under [`Charge::Always`](crate::Charge::Always) every request of
        /// cost 1 or more is charged whether admitted or not: usage
        /// reported after the work, which must not be lost when the budget
        /// is already spent. A report reaches the store past the deny cache
        /// and the leases. [`Limiter::charge`](crate::Limiter::charge)
        /// charges one request so under any setting.
        pub fn charge(mut self, charge: $crate::Charge) -> Self {
            self.options.charge = charge;
            self
        }

        #[doc = $crate::limiter::summary!($builder, top_keys)]
        ///
        /// Read them with `top_keys(metric, n)` on the limiter; memory is
        /// bounded by the settings' capacity whatever the number of keys
        /// (see [`TopKeys`](crate::top::TopKeys)). Each decision takes a lock
        /// to count itself. The minutes are timed by the
        /// [`local_clock`](Self::local_clock).
        pub fn top_keys(mut self, top: $crate::top::TopKeys) -> Self {
            self.options.top_keys = Some(top);
            self
        }

        #[doc = $crate::limiter::summary!($builder, exempt)]
        ///
        /// An exempt key is always allowed, and never charged or stored.
        pub fn exempt(mut self, keys: $crate::KeyList) -> Self {
            self.options.exempt = keys;
            self
        }

        #[doc = $crate::limiter::summary!($builder, deny)]
        ///
        /// A denied key is always denied (with no `retry_after`), even when
        /// it is exempt too.
        pub fn deny(mut self, keys: $crate::KeyList) -> Self {
            self.options.deny = keys;
            self
        }

        /// The clock of the deny cache, the circuit breaker and the
        /// fallback limiter (default: the system clock). It measures only
        /// durations on this host, so it need not agree with the store's
        /// clock.
        pub fn local_clock(mut self, clock: impl $crate::clock::Clock) -> Self {
            self.options.clock = Some(std::sync::Arc::new(clock));
            self
        }

        /// The prefix of every state key in shared stores (default
        /// `tollgate`).
        pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
            self.prefix = prefix.into();
            self
        }
    };
}

pub(crate) use {option_setters, summary};
