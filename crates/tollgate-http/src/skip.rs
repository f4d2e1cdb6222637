//! Requests the middleware lets through untouched: no decision, no charge,
//! no headers.

use std::sync::Arc;

use crate::request::RequestInfo;

type SkipFn = dyn Fn(&RequestInfo<'_>) -> bool + Send + Sync;

/// A rule for requests that bypass rate limiting altogether (health checks,
/// metrics scrapes): they reach the service without a decision, are
/// charged nothing and get no rate-limit headers. Added with
/// [`RateLimit::skip`](crate::RateLimit::skip); a request is skipped when
/// any rule added holds.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Limiter;
/// use tollgate_http::{RateLimit, Skip};
///
/// let limiter = Limiter::builder().limit(100).window(Duration::from_secs(60)).build()?;
/// let config = RateLimit::new(limiter)
///     .skip(Skip::path("/healthz"))
///     .skip(Skip::path_prefix("/internal"))
///     .skip(Skip::method("OPTIONS"))
///     .skip_if(|req| req.header("x-synthetic-probe").is_some());
/// # Ok::<(), tollgate::Error>(())
/// ```
///
/// A rule reads the request as the client sent it: a client can reach a
/// skipped path or method at will, so skip only what costs little to serve,
/// or what a trusted party alone can send.
#[derive(Clone)]
pub struct Skip {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Method(Box<str>),
    Path(Box<str>),
    PathPrefix(Box<str>),
    Custom(Arc<SkipFn>),
}

impl std::fmt::Debug for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Method(m) => f.debug_tuple("Skip::Method").field(m).finish(),
            Kind::Path(p) => f.debug_tuple("Skip::Path").field(p).finish(),
            Kind::PathPrefix(p) => f.debug_tuple("Skip::PathPrefix").field(p).finish(),
            Kind::Custom(_) => f.write_str("Skip::Custom(..)"),
        }
    }
}

impl Skip {
    /// Requests with method `method`, compared exactly (methods are case
    /// sensitive: `GET`, not `get`).
    pub fn method(method: &str) -> Self {
        Self {
            kind: Kind::Method(method.into()),
        }
    }

    /// Requests for exactly `path` (without the query; no trailing-slash
    /// or case folding: `/healthz/` is another path).
    pub fn path(path: &str) -> Self {
        Self {
            kind: Kind::Path(path.into()),
        }
    }

    /// Requests for `prefix` or any path below it, segment by segment:
    /// `Skip::path_prefix("/internal")` skips `/internal` and
    /// `/internal/metrics`, not `/internals`. A trailing `/` in `prefix` is
    /// ignored.
    pub fn path_prefix(prefix: &str) -> Self {
        Self {
            kind: Kind::PathPrefix(prefix.trim_end_matches('/').into()),
        }
    }

    /// Requests for which `f` answers `true`.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&RequestInfo<'_>) -> bool + Send + Sync + 'static,
    {
        Self {
            kind: Kind::Custom(Arc::new(f)),
        }
    }

    /// Whether the rule holds for `req`.
    pub(crate) fn holds(&self, req: &RequestInfo<'_>) -> bool {
        match &self.kind {
            Kind::Method(method) => req.method() == &**method,
            Kind::Path(path) => req.path() == &**path,
            Kind::PathPrefix(prefix) => req
                .path()
                .strip_prefix(&**prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
            Kind::Custom(f) => f(req),
        }
    }
}

#[cfg(all(test, feature = "tower"))]
mod tests {
    use super::*;

    fn holds(skip: &Skip, method: &str, uri: &str) -> bool {
        let req = http::Request::builder().method(method).uri(uri).body(()).unwrap();
        let (parts, ()) = req.into_parts();
        skip.holds(&RequestInfo::from_http(&parts))
    }

    #[test]
    fn a_path_prefix_matches_whole_segments_only() {
        for prefix in ["/internal", "/internal/"] {
            let skip = Skip::path_prefix(prefix);
            assert!(holds(&skip, "GET", "/internal"), "{prefix}");
            assert!(holds(&skip, "GET", "/internal/"), "{prefix}");
            assert!(holds(&skip, "GET", "/internal/metrics?x=1"), "{prefix}");
            assert!(!holds(&skip, "GET", "/internals"), "{prefix}");
            assert!(!holds(&skip, "GET", "/"), "{prefix}");
        }
        // The root prefix covers every path.
        assert!(holds(&Skip::path_prefix("/"), "GET", "/anything"));
    }

    #[test]
    fn a_path_and_a_method_match_exactly() {
        let path = Skip::path("/healthz");
        assert!(holds(&path, "GET", "/healthz?verbose"));
        assert!(!holds(&path, "GET", "/healthz/"));
        assert!(!holds(&path, "GET", "/HEALTHZ"));
        let method = Skip::method("OPTIONS");
        assert!(holds(&method, "OPTIONS", "/"));
        assert!(!holds(&method, "GET", "/"));
    }
}
