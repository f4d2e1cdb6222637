//! Which rate-limit headers a response carries.

/// Which rate-limit headers go on every decided response.
///
/// The figures are those of the decision: for a compound policy (several
/// limits on one request), `remaining` is the least any limit has left,
/// `reset` the longest any takes to be fresh, and the limit is that of the
/// limit that bound the decision ([`Decision::bound_by`](tollgate::Decision::bound_by)), so a client
/// reading only `RateLimit-Limit`/`X-RateLimit-Limit` sees the limit that
/// matters now. Only [`HeaderMode::IetfDraft`] lists every limit.
///
/// Whatever the mode, a 429 carries `Retry-After` (delay-seconds, rounded
/// up) when waiting helps: not when the request's cost exceeds a limit of
/// the policy, which no delay can admit. A response that was not decided
/// (a backend error, a missing key, an invalid cost) and a request admitted
/// under fail-open carry none of these headers. Delays are whole seconds
/// rounded up, so a client that waits the advertised time is never early.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeaderMode {
    /// `RateLimit-Limit: 100`, `RateLimit-Remaining: 42`,
    /// `RateLimit-Reset: 17` (seconds until the key's state is fresh).
    #[default]
    RateLimit,
    /// The structured fields of the IETF draft
    /// (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy` lists the
    /// policy's limits, each with its quota `q` and window `w` in seconds,
    /// and `RateLimit` names the one that bound the decision, with what
    /// remains (`r`) and the seconds until the key's state is fresh (`t`):
    ///
    /// ```text
    /// RateLimit-Policy: "default";q=100;w=60
    /// RateLimit: "default";r=42;t=17
    /// ```
    ///
    /// The name is the resource's for a resource with its own policy,
    /// otherwise `default`. Each limit of a compound policy is named by the
    /// policy's name and its index in [`Policy::limits`](tollgate::Policy::limits), as in the path
    /// `limits[1]` of a policy file, so the names differ and say which
    /// limit they are:
    ///
    /// ```text
    /// RateLimit-Policy: "api[0]";q=10;w=1, "api[1]";q=1000;w=3600
    /// RateLimit: "api[1]";r=0;t=3
    /// ```
    ///
    /// `r` and `t` are the decision's, as in the other modes: the least any
    /// limit has left and the longest any takes to be fresh.
    IetfDraft,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
    /// (seconds until reset, like `RateLimit-Reset`).
    Legacy,
    /// No rate-limit headers (a 429 still carries `Retry-After`).
    Off,
}
