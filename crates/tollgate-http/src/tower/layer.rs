//! The layer.

use std::sync::Arc;

use tower_layer::Layer;

use super::service::RateLimitService;
use crate::config::RateLimit;
use crate::core::Core;
use crate::limits::Limits;

/// A tower layer that rate-limits requests; build it with
/// [`RateLimit::layer`].
pub struct RateLimitLayer<L> {
    core: Arc<Core<L>>,
}

impl<L> Clone for RateLimitLayer<L> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

impl<L> std::fmt::Debug for RateLimitLayer<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RateLimitLayer").field(&self.core).finish()
    }
}

impl<L: Limits> RateLimit<L> {
    /// This configuration as a tower layer.
    pub fn layer(self) -> RateLimitLayer<L> {
        RateLimitLayer {
            core: self.into_core(),
        }
    }
}

impl<S, L> Layer<S> for RateLimitLayer<L> {
    type Service = RateLimitService<S, L>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, self.core.clone())
    }
}
