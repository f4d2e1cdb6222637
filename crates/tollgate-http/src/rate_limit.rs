//! [`RateLimit`]: the configuration shared by the tower layer and the
//! actix-web middleware.

use std::sync::Arc;

use crate::engine::{DeniedFn, Engine, FailureFn, KeyErrorFn};
use crate::headers::HeaderMode;
use crate::ip::IpGrouping;
use crate::key::{KeyExtractor, MissingKey};
use crate::limits::Limits;
use crate::reply::{GrpcMode, Reply};
use crate::reply_context::{Denied, Failure, KeyRejected, ReplyFormat};
use crate::resource::ResourceExtractor;

/// A rate-limiting middleware configuration around a limiter.
///
/// Configure it once, then turn it into a tower layer with
/// `RateLimit::layer` (feature `tower`) or an actix-web middleware with
/// `RateLimit::actix` (feature `actix`). Both behave the same. Cloning it is
/// cheap: the configuration is shared, and copied only when a clone is
/// configured further.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Limiter;
/// use tollgate_http::{HeaderMode, KeyExtractor, MissingKey, RateLimit, ReplyFormat};
///
/// let limiter = Limiter::builder().limit(100).window(Duration::from_secs(60)).build()?;
/// let config = RateLimit::new(limiter)
///     .key(KeyExtractor::header("x-api-key"))
///     .missing_key(MissingKey::PeerIp)
///     .headers(HeaderMode::IetfDraft)
///     .format(ReplyFormat::ProblemJson);
/// # Ok::<(), tollgate::Error>(())
/// ```
pub struct RateLimit<L> {
    engine: Arc<Engine<L>>,
}

impl<L> Clone for RateLimit<L> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
        }
    }
}

impl<L> std::fmt::Debug for RateLimit<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.engine.fmt(f)
    }
}

impl<L: Limits> RateLimit<L> {
    /// Limits requests with `limiter` (a [`tollgate::Limiter`] or
    /// [`tollgate::ResourceLimiter`] on any backend), keyed by peer address,
    /// with resources taken from the matched route.
    pub fn new(limiter: L) -> Self {
        Self::shared(Arc::new(limiter))
    }

    /// Like [`RateLimit::new`], for a limiter the application also uses
    /// directly.
    pub fn shared(limiter: Arc<L>) -> Self {
        Self {
            engine: Arc::new(Engine::new(limiter)),
        }
    }

    /// The limiter.
    pub fn limiter(&self) -> &Arc<L> {
        &self.engine.limits
    }

    /// How to take the key from a request (default: the peer address).
    pub fn key(mut self, key: KeyExtractor) -> Self {
        self.engine_mut().key = key;
        self
    }

    /// What to do when a request has no key (default: reject it).
    pub fn missing_key(mut self, missing: MissingKey) -> Self {
        self.engine_mut().missing = missing;
        self
    }

    /// How to take the resource from a request (default: the matched route
    /// template). Ignored by a plain [`tollgate::Limiter`].
    pub fn resource(mut self, resource: ResourceExtractor) -> Self {
        self.engine_mut().resource = resource;
        self
    }

    /// How addresses are grouped into keys (default: IPv4 /32, IPv6 /64).
    pub fn ip_grouping(mut self, grouping: IpGrouping) -> Self {
        self.engine_mut().grouping = grouping;
        self
    }

    /// Which rate-limit headers to send (default: `RateLimit-*`).
    pub fn headers(mut self, mode: HeaderMode) -> Self {
        self.engine_mut().headers = mode;
        self
    }

    /// The body format of the default replies (default: plain text).
    pub fn format(mut self, format: ReplyFormat) -> Self {
        self.engine_mut().format = format;
        self
    }

    /// When to answer with gRPC statuses (default: for gRPC content types).
    pub fn grpc(mut self, grpc: GrpcMode) -> Self {
        self.engine_mut().grpc = grpc;
        self
    }

    /// Replaces the reply to a denied request (default:
    /// [`Reply::for_denied`]). `Retry-After` and the rate-limit headers are
    /// set on the returned reply.
    pub fn on_denied<F>(mut self, handler: F) -> Self
    where
        F: Fn(&Denied<'_>) -> Reply + Send + Sync + 'static,
    {
        self.engine_mut().on_denied = Some(Arc::new(handler) as Arc<DeniedFn>);
        self
    }

    /// Replaces the reply when the backend failed under fail-closed
    /// (default: [`Reply::for_failure`], a 503).
    pub fn on_failure<F>(mut self, handler: F) -> Self
    where
        F: Fn(&Failure<'_>) -> Reply + Send + Sync + 'static,
    {
        self.engine_mut().on_failure = Some(Arc::new(handler) as Arc<FailureFn>);
        self
    }

    /// Replaces the reply to a request without a key under
    /// [`MissingKey::Reject`] (default: [`Reply::for_key_error`], a 400).
    pub fn on_key_error<F>(mut self, handler: F) -> Self
    where
        F: Fn(&KeyRejected<'_>) -> Reply + Send + Sync + 'static,
    {
        self.engine_mut().on_key_error = Some(Arc::new(handler) as Arc<KeyErrorFn>);
        self
    }
}

impl<L> RateLimit<L> {
    /// The engine, to configure; copied first when it is shared.
    fn engine_mut(&mut self) -> &mut Engine<L> {
        Arc::make_mut(&mut self.engine)
    }

    /// The engine that decides each request.
    pub(crate) fn engine(&self) -> &Engine<L> {
        &self.engine
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::Limiter;

    use super::*;

    #[test]
    fn configuring_a_clone_leaves_the_original_as_it_was() {
        let limiter = Limiter::builder()
            .limit(1)
            .window(Duration::from_secs(1))
            .build()
            .unwrap();
        let original = RateLimit::new(limiter).headers(HeaderMode::Off);
        let changed = original.clone().headers(HeaderMode::Legacy);
        assert_eq!(original.engine().headers, HeaderMode::Off);
        assert_eq!(changed.engine().headers, HeaderMode::Legacy);
        assert!(Arc::ptr_eq(original.limiter(), changed.limiter()));
    }
}
