//! The layer: wraps a service in a [`RateLimitService`].

use tower_layer::Layer;

use super::service::RateLimitService;
use crate::rate_limit::RateLimit;
use tollgate::Limits;

/// A tower layer that rate-limits requests to the services it wraps.
///
/// Made with [`RateLimitLayer::new`] or [`RateLimit::layer`]; every
/// service it makes shares the configuration and the limiter.
pub struct RateLimitLayer<L> {
    config: RateLimit<L>,
}

impl<L> RateLimitLayer<L> {
    /// A layer limiting requests as `config` says.
    pub fn new(config: RateLimit<L>) -> Self {
        Self { config }
    }
}

impl<L> Clone for RateLimitLayer<L> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<L> std::fmt::Debug for RateLimitLayer<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RateLimitLayer").field(&self.config).finish()
    }
}

impl<L: Limits> RateLimit<L> {
    /// This configuration as a tower layer: [`RateLimitLayer::new`].
    pub fn layer(self) -> RateLimitLayer<L> {
        RateLimitLayer::new(self)
    }
}

impl<S, L> Layer<S> for RateLimitLayer<L> {
    type Service = RateLimitService<S, L>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, self.config.clone())
    }
}
