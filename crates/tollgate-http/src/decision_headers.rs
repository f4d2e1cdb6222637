//! The headers of a decision for services that answer with a decision
//! rather than wrap a handler (an auth endpoint for proxies, a gRPC
//! rate-limit service): the same mapping the middleware uses.

use tollgate::{Decision, Policy};

use crate::headers::{write_denial, RateHeaders};
use crate::HeaderMode;

/// Sets the rate-limit headers of `decision` under `mode` on `map`, and
/// `Retry-After` (whole seconds, rounded up) when it denies, exactly as the
/// middleware sets them on a response. `name` and `policy` name the policy
/// in the IETF draft's structured fields (`default` for the default
/// policy). A decision admitted under fail-open gets no headers, as in the
/// middleware: it says nothing about the key's usage.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Decision, Policy, Strategy};
/// use tollgate_http::{write_decision_headers, HeaderMode};
///
/// let policy = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60))?;
/// let denied = Decision::new(false, 5, 0, Duration::from_secs(12), Some(Duration::from_millis(11_500)));
/// let mut headers = tollgate_http::http::HeaderMap::new();
/// write_decision_headers(HeaderMode::RateLimit, &denied, "login", &policy, &mut headers);
/// assert_eq!(headers["ratelimit-remaining"], "0");
/// assert_eq!(headers["retry-after"], "12");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub fn write_decision_headers(
    mode: HeaderMode,
    decision: &Decision,
    name: &str,
    policy: &Policy,
    map: &mut http::HeaderMap,
) {
    if decision.fail_open {
        return;
    }
    let headers = RateHeaders::for_decision(mode, decision, || (name, policy));
    write_denial(headers, decision, map);
}
