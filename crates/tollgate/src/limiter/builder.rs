//! The builder of a [`Limiter`].

use std::sync::Arc;
use std::time::Duration;

use super::options::Options;
use super::setters::option_setters;
use super::{validate_prefix, Limiter, DEFAULT_KEY_PREFIX};
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, Scope};
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::metrics::LimiterMetrics;
use crate::policy::Policy;
use crate::strategy::Strategy;

/// Configures a [`Limiter`].
#[derive(Debug, Clone)]
pub struct LimiterBuilder<B> {
    backend: B,
    strategy: Strategy,
    limit: Option<u64>,
    window: Option<Duration>,
    policy: Option<Policy>,
    options: Options,
    prefix: String,
    resource: String,
    metrics_resource: Option<String>,
    shared_metrics: Option<Arc<LimiterMetrics>>,
}

impl Default for LimiterBuilder<MemoryBackend> {
    fn default() -> Self {
        Self {
            backend: MemoryBackend::new(),
            strategy: Strategy::SlidingWindow,
            limit: None,
            window: None,
            policy: None,
            options: Options::default(),
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            resource: String::new(),
            metrics_resource: None,
            shared_metrics: None,
        }
    }
}

impl LimiterBuilder<MemoryBackend> {
    /// Runs the in-memory backend on `clock` (e.g. a [`crate::clock::ManualClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.backend = self.backend.clock(clock);
        self
    }
}

impl<B: Backend> LimiterBuilder<B> {
    /// The strategy (default: sliding window).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// `L`, the units admitted per window (required).
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// `W`, the window (required).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Enforces `policy`, one limit or several ([`Policy::compound`]),
    /// instead of the strategy, limit and window set one by one.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    option_setters!(LimiterBuilder);

    /// A resource name that separates this limiter's state from others
    /// sharing the same store and prefix.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = resource.into();
        self
    }

    /// The `resource` label of this limiter's metrics (default: its
    /// [`resource`](Self::resource)), so that many limiters can be counted
    /// as one: the series of a label set are shared, and each limiter then
    /// adds only its handles, not series of its own. A service with
    /// thousands of small limits (one per Envoy descriptor, say) keeps the
    /// number of series, and the memory each costs in the recorder, bounded.
    pub fn metrics_resource(mut self, label: impl Into<String>) -> Self {
        self.metrics_resource = Some(label.into());
        self
    }

    /// Counts this limiter's decisions on `other`'s metrics handles when
    /// both have the same labels (the `resource` label, see
    /// [`metrics_resource`](Self::metrics_resource), and the strategy);
    /// otherwise it registers its own, as without this option. The series
    /// are the same either way: what is saved is the handles' memory (a few
    /// hundred bytes per limiter with a recorder installed), which counts
    /// when thousands of limiters are counted as one.
    pub fn share_metrics<C: Backend>(mut self, other: &Limiter<C>) -> Self {
        self.shared_metrics = Some(Arc::clone(&other.metrics));
        self
    }

    /// Replaces the backend.
    pub fn backend<C: Backend>(self, backend: C) -> LimiterBuilder<C> {
        LimiterBuilder {
            backend,
            strategy: self.strategy,
            limit: self.limit,
            window: self.window,
            policy: self.policy,
            options: self.options,
            prefix: self.prefix,
            resource: self.resource,
            metrics_resource: self.metrics_resource,
            shared_metrics: self.shared_metrics,
        }
    }

    /// The resource the limiter is built for.
    pub(crate) fn resource_name(&self) -> &str {
        &self.resource
    }

    /// The builder with `policy` in place of whatever policy, limit or
    /// window it had, its limiter labelled in the metrics as this one's
    /// (under `resource` otherwise).
    pub(crate) fn replacing_policy(mut self, policy: Policy, resource: &str) -> Self {
        self.limit = None;
        self.window = None;
        self.policy = Some(policy);
        if self.metrics_resource.is_none() {
            self.metrics_resource = Some(self.resource.clone());
        }
        self.resource = resource.to_owned();
        self
    }

    /// Validates the configuration and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field that is missing or invalid, or
    /// the one given twice (a [`policy`](Self::policy) and a limit or window).
    pub fn build(self) -> Result<Limiter<B>, Error> {
        self.build_after(None)
    }

    /// Builds the limiter to take over from `previous` (its policy changed
    /// at run time), keeping the state of every limit whose strategy and
    /// window stay, as [`Backend::rebind`] does. `previous` must have served
    /// the same key prefix and resource on the same backend; the caller
    /// swaps the new limiter in (as [`Limiters::replace`](crate::Limiters::replace)
    /// does for each of its limiters).
    ///
    /// # Errors
    ///
    /// As for [`build`](Self::build); `previous` is left as it was.
    pub fn build_from(self, previous: &Limiter<B>) -> Result<Limiter<B>, Error> {
        self.build_after(Some(previous))
    }

    fn build_after(self, previous: Option<&Limiter<B>>) -> Result<Limiter<B>, Error> {
        let policy = match self.policy {
            Some(policy) => {
                if self.limit.is_some() || self.window.is_some() {
                    return Err(ConfigError::new(
                        "policy",
                        "is given together with a limit or window; give one or the other",
                    )
                    .into());
                }
                policy
            }
            None => {
                let limit = self
                    .limit
                    .ok_or_else(|| ConfigError::new("limit", "is required"))?;
                let window = self
                    .window
                    .ok_or_else(|| ConfigError::new("window", "is required"))?;
                Policy::new(self.strategy, limit, window)?
            }
        };
        validate_prefix(&self.prefix)?;
        let scope = Scope {
            prefix: &self.prefix,
            resource: &self.resource,
            policy: &policy,
        };
        Limiter::bind_after(
            &self.backend,
            &scope,
            &self.options,
            previous,
            (self.metrics_resource.as_deref(), self.shared_metrics.as_ref()),
        )
    }
}
