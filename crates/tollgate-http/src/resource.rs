//! Which policy of a [`Limiters`](tollgate::Limiters) set applies to a
//! request.

use std::borrow::Cow;
use std::sync::Arc;

use crate::request::RequestInfo;

type ResourceFn = dyn Fn(&RequestInfo<'_>) -> Option<String> + Send + Sync;

/// Takes the resource name from a request, which selects the policy of a
/// [`Limiters`](tollgate::Limiters) set.
///
/// A request without a resource (no route matched, a closure returned
/// `None`), or whose resource has no policy of its own (as in a set made
/// from a single [`Limiter`](tollgate::Limiter)), gets the default policy.
///
/// ```
/// use tollgate_http::ResourceExtractor;
///
/// let by_route = ResourceExtractor::route(); // `/users/{id}`, not `/users/1`
/// let by_method = ResourceExtractor::method();
/// let by_service = ResourceExtractor::custom(|req| {
///     req.path().strip_prefix('/')?.split('/').next().map(str::to_owned)
/// });
/// ```
#[derive(Clone)]
pub struct ResourceExtractor {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Route,
    Method,
    Custom(Arc<ResourceFn>),
}

impl std::fmt::Debug for ResourceExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            Kind::Route => "ResourceExtractor::Route",
            Kind::Method => "ResourceExtractor::Method",
            Kind::Custom(_) => "ResourceExtractor::Custom(..)",
        })
    }
}

impl Default for ResourceExtractor {
    /// [`ResourceExtractor::route`].
    fn default() -> Self {
        Self::route()
    }
}

impl ResourceExtractor {
    /// The matched route template, such as `/users/{id}`, so that every
    /// user shares one policy (the default extractor). See
    /// [`RequestInfo::route`] for where it comes from.
    pub fn route() -> Self {
        Self { kind: Kind::Route }
    }

    /// The method, e.g. `POST`.
    pub fn method() -> Self {
        Self { kind: Kind::Method }
    }

    /// Any function of the request; `None` means the default policy.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&RequestInfo<'_>) -> Option<String> + Send + Sync + 'static,
    {
        Self {
            kind: Kind::Custom(Arc::new(f)),
        }
    }

    /// The resource of `req`; empty for the default policy.
    pub fn extract<'a>(&self, req: &RequestInfo<'a>) -> Cow<'a, str> {
        match &self.kind {
            Kind::Route => req.route().unwrap_or_default(),
            Kind::Method => Cow::Borrowed(req.method()),
            Kind::Custom(f) => f(req).map(Cow::Owned).unwrap_or_default(),
        }
    }
}
