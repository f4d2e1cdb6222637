//! The layer: wraps a service in a [`RateLimitService`].

use tower_layer::Layer;

use super::service::RateLimitService;
use crate::rate_limit::RateLimit;
use tollgate::backend::Backend;
use tollgate::MemoryBackend;

/// A tower layer that rate-limits requests to the services it wraps.
///
/// Made with [`RateLimitLayer::new`] or [`RateLimit::layer`]; every
/// service it makes shares the configuration and the limiters.
pub struct RateLimitLayer<B: Backend = MemoryBackend> {
    config: RateLimit<B>,
}

impl<B: Backend> RateLimitLayer<B> {
    /// A layer limiting requests as `config` says.
    pub fn new(config: RateLimit<B>) -> Self {
        Self { config }
    }
}

impl<B: Backend> Clone for RateLimitLayer<B> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for RateLimitLayer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RateLimitLayer").field(&self.config).finish()
    }
}

impl<B: Backend> RateLimit<B> {
    /// This configuration as a tower layer: [`RateLimitLayer::new`].
    pub fn layer(self) -> RateLimitLayer<B> {
        RateLimitLayer::new(self)
    }
}

impl<S, B: Backend> Layer<S> for RateLimitLayer<B> {
    type Service = RateLimitService<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, self.config.clone())
    }
}
