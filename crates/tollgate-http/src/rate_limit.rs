//! [`RateLimit`]: the configuration shared by the tower layer and the
//! actix-web middleware.

use std::sync::Arc;

use crate::cost::CostFn;
use crate::cost_error::CostError;
use crate::engine::{CostErrorFn, DeniedFn, Engine, FailureFn, KeyErrorFn};
use crate::headers::HeaderMode;
use crate::ip::IpGrouping;
use crate::key::{KeyExtractor, MissingKey};
use crate::reply::{GrpcMode, Reply};
use crate::reply_context::{CostRejected, Denied, Failure, KeyRejected, ReplyFormat};
use crate::request::{assert_header_name, RequestInfo};
use crate::resource::ResourceExtractor;
use crate::response_cost::{Adjustments, StatusFn};
use crate::skip::Skip;
use tollgate::backend::Backend;
use tollgate::{Limiters, MemoryBackend};

/// A rate-limiting middleware configuration around a set of limiters
/// ([`Limiters`]) on backend `B`: in memory by default, or any other
/// backend (Redis, a store of your own, one chosen at run time).
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
pub struct RateLimit<B: Backend = MemoryBackend> {
    engine: Arc<Engine<B>>,
}

impl<B: Backend> Clone for RateLimit<B> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for RateLimit<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.engine.fmt(f)
    }
}

impl<B: Backend> RateLimit<B> {
    /// Limits requests with `limiters`, keyed by peer address, with
    /// resources taken from the matched route.
    ///
    /// Takes a single [`Limiter`](tollgate::Limiter) (its policy applies to
    /// every request), a [`Limiters`] (a resource's own policy, or the
    /// default one), or an `Arc<Limiters>` the application keeps too: to
    /// [`replace`](Limiters::replace) its policies while it serves, or to
    /// decide through it elsewhere.
    pub fn new(limiters: impl Into<Arc<Limiters<B>>>) -> Self {
        Self {
            engine: Arc::new(Engine::new(limiters.into())),
        }
    }

    /// The limiters requests are decided by, shared with every clone of
    /// this configuration.
    pub fn limiters(&self) -> &Arc<Limiters<B>> {
        &self.engine.limiters
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
    /// template). A resource without a policy of its own in the
    /// [`Limiters`] is decided under the default policy.
    pub fn resource(mut self, resource: ResourceExtractor) -> Self {
        self.engine_mut().resource = resource;
        self
    }

    /// What each request costs (default: 1), in units of the limits it is
    /// decided against; with [`RateLimit::cost_header`], what a request
    /// without that header costs.
    ///
    /// A constant per route is this setting on a configuration given to
    /// that route alone: with axum, a layer on the route
    /// (`get(upload).layer(rate_limit.clone().cost(5).layer())`) or
    /// `Router::route_layer` on a router of the costly routes; with
    /// actix-web, `wrap` on the resource or scope. The clone shares the
    /// limiters, so the route still draws on the budget of its key. One
    /// layer can also price each route with [`RateLimit::cost_fn`] and
    /// [`RequestInfo::route`].
    ///
    /// A cost of 0 is a peek (see the crate's semantics): the request is
    /// decided (admitted if a request of cost 1 would be now), charged
    /// nothing, and gets the rate-limit headers like any other. A cost above
    /// a limit of the policy can never be admitted: it is denied with 429
    /// and no `Retry-After`.
    pub fn cost(mut self, cost: u64) -> Self {
        self.engine_mut().cost.set_constant(cost);
        self
    }

    /// Takes each request's cost from request header `name` (replacing a
    /// [`RateLimit::cost_fn`]); a request without it costs what
    /// [`RateLimit::cost`] says (1 unless set).
    ///
    /// The value must be one decimal integer from 0 to 2⁶⁴ − 1 in digits
    /// only (leading zeros allowed): a request whose header is empty,
    /// signed, negative, too large, not ASCII, holds anything but digits or
    /// appears more than once is answered 400 (gRPC `INVALID_ARGUMENT`)
    /// with a message naming the header and the problem, and is neither
    /// decided nor charged (see [`RateLimit::on_cost_error`]).
    ///
    /// A client that sets its own cost can claim 1 (or 0, a peek) for
    /// anything: read the cost from a header only when something trusted
    /// sets it, such as a gateway that removes the client's own.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name.
    pub fn cost_header(mut self, name: &str) -> Self {
        assert_header_name(name);
        self.engine_mut().cost.set_header(name);
        self
    }

    /// Asks `f` for each request's cost (replacing a
    /// [`RateLimit::cost_header`]): for example the upload size from
    /// `Content-Length`, or a GraphQL query's complexity. The body is not
    /// read here; a cost that depends on it is computed by an earlier
    /// middleware, which stores it in a request extension for `f` to read
    /// with [`RequestInfo::extension`].
    ///
    /// An `Err` answers the request 400 (gRPC `INVALID_ARGUMENT`) with the
    /// error's message, without deciding or charging it (see
    /// [`RateLimit::on_cost_error`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Limiter;
    /// use tollgate_http::{CostError, RateLimit};
    ///
    /// let limiter = Limiter::builder().limit(1_000_000).window(Duration::from_secs(60)).build()?;
    /// // A budget of bytes per minute: each upload costs its size in bytes.
    /// let config = RateLimit::new(limiter).cost_fn(|req| {
    ///     let length = req.header_str("content-length").ok_or(CostError::new("content-length is required"))?;
    ///     length.parse().map_err(|_| CostError::new("content-length is not a number"))
    /// });
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn cost_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&RequestInfo<'_>) -> Result<u64, CostError> + Send + Sync + 'static,
    {
        self.engine_mut().cost.set_custom(Arc::new(f) as Arc<CostFn>);
        self
    }

    /// Holds a request over the rate for its turn, up to `max`, instead of
    /// refusing it (nginx's `limit_req … burst= delay=`): it waits through
    /// the limiter ([`Limiter::acquire_n_within`](tollgate::Limiter::acquire_n_within)
    /// with `max`) and is passed on when admitted; a request whose turn is
    /// further than `max` away is refused at once as without this setting,
    /// with `Retry-After` the wait after which it would be held no longer
    /// than `max`. The `RateLimit` headers are those of the decision that
    /// admitted it.
    ///
    /// The token and leaky bucket reserve the next slots their rate allows
    /// and a sliding window the next slots within its current window; a
    /// fixed window's denial is held until the window turns when that is
    /// within `max`, then decided again. Requests held on a reservation are
    /// counted in `tollgate_delayed_total`. A held request keeps its
    /// connection and its task: bound `max` by what clients and the server
    /// can wait. A request whose client leaves while it is held cancels its
    /// reservation (the units come back when nothing was charged after it).
    /// Holding uses tokio's timer.
    ///
    /// On a concurrency policy
    /// ([`Strategy::Concurrency`](tollgate::Strategy::Concurrency)), a
    /// request finding every slot of its key held waits up to `max` for
    /// one, first come first served among the requests of this process
    /// (one queue per resource and key, gone with its last waiter, shared
    /// by the clones of this configuration): the first in line asks again
    /// when a permit of the key held by this process is released, or when
    /// the denial's `retry_after` passes (a slot held elsewhere expiring).
    /// It is refused with 429 once `max` has passed, and at once when its
    /// cost exceeds the limit.
    pub fn delay(mut self, max: std::time::Duration) -> Self {
        self.engine_mut().delay = Some(max);
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

    /// Replaces the reply to a request whose cost cannot be taken from it
    /// (default: [`Reply::for_cost_error`], a 400).
    pub fn on_cost_error<F>(mut self, handler: F) -> Self
    where
        F: Fn(&CostRejected<'_>) -> Reply + Send + Sync + 'static,
    {
        self.engine_mut().on_cost_error = Some(Arc::new(handler) as Arc<CostErrorFn>);
        self
    }

    /// Lets the requests `rule` picks through untouched: they reach the
    /// service without a decision, are charged nothing, and their responses
    /// get no rate-limit headers and settle nothing. Each call adds a rule;
    /// a request is skipped when any holds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Limiter;
    /// use tollgate_http::{RateLimit, Skip};
    ///
    /// let limiter = Limiter::builder().limit(100).window(Duration::from_secs(60)).build()?;
    /// // Health checks and CORS preflights are never limited.
    /// let config = RateLimit::new(limiter)
    ///     .skip(Skip::path("/healthz"))
    ///     .skip(Skip::method("OPTIONS"));
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn skip(mut self, rule: Skip) -> Self {
        self.engine_mut().skip.push(rule);
        self
    }

    /// Lets the requests for which `f` answers `true` through untouched:
    /// [`RateLimit::skip`] with [`Skip::custom`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Limiter;
    /// use tollgate_http::RateLimit;
    ///
    /// let limiter = Limiter::builder().limit(100).window(Duration::from_secs(60)).build()?;
    /// let config = RateLimit::new(limiter)
    ///     .skip_if(|req| req.method() == "GET" && req.path().starts_with("/static/"));
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn skip_if<F>(self, f: F) -> Self
    where
        F: Fn(&RequestInfo<'_>) -> bool + Send + Sync + 'static,
    {
        self.skip(Skip::custom(f))
    }

    /// Gives back the charge of an admitted request whose response status
    /// `f` picks (a request that failed on the server's side, say), with a
    /// refund of its cost on the same key and policy once the service has
    /// answered: the next requests find the quota as if it had never been
    /// made. See [`RateLimit::no_charge_on_server_errors`] for 5xx.
    ///
    /// The request is decided and charged up front as always, so it is
    /// denied when the quota is spent whatever its response would be; its
    /// rate-limit headers show the charge. Then:
    ///
    /// - Only what the limiter charged is given back. Nothing is refunded
    ///   for a request the limiter did not charge: an exempt key, a
    ///   decision admitted only by shadow mode (enforcement would have
    ///   denied it, so it was charged nothing), an admission by fail-open,
    ///   a decision of the in-memory fallback (operations reach the store,
    ///   not the fallback), a skipped request, or a cost of 0.
    /// - A compound policy is refunded on each of its limits, each of which
    ///   was charged the cost.
    /// - A refund gives back what
    ///   [`Operation::Refund`](tollgate::Operation::Refund) gives back: for
    ///   a response that comes after the request's window has ended, at
    ///   most what the key was charged in the current window.
    /// - When the service fails without a response (its future returns an
    ///   error), nothing is refunded: there is no status to judge.
    ///   actix-web turns a handler's error into a response before the
    ///   middleware sees it, so there the error's status is judged.
    /// - A refund that fails (a store error) is counted in
    ///   [`RateLimit::adjustments`] and otherwise ignored: the response goes
    ///   out unchanged.
    ///
    /// The refund is applied before the response is returned: at once in
    /// memory, one round trip on a store (Redis); a response that settles
    /// nothing waits for nothing. With a response cost header as well
    /// ([`RateLimit::cost_from_response_header`]), a picked response is
    /// refunded whole and its header is not read.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Limiter;
    /// use tollgate_http::RateLimit;
    ///
    /// let limiter = Limiter::builder().limit(100).window(Duration::from_secs(60)).build()?;
    /// // Neither server errors nor 404s count against a client.
    /// let config = RateLimit::new(limiter)
    ///     .no_charge_when(|status| status.is_server_error() || status.as_u16() == 404);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn no_charge_when<F>(mut self, f: F) -> Self
    where
        F: Fn(http::StatusCode) -> bool + Send + Sync + 'static,
    {
        self.engine_mut()
            .response_cost
            .set_no_charge(Arc::new(f) as Arc<StatusFn>);
        self
    }

    /// Gives back the charge of requests answered with a 5xx status:
    /// [`RateLimit::no_charge_when`] with
    /// [`StatusCode::is_server_error`](http::StatusCode::is_server_error).
    pub fn no_charge_on_server_errors(self) -> Self {
        self.no_charge_when(|status| status.is_server_error())
    }

    /// Takes the actual cost of each admitted request from response header
    /// `name`, which the service sets (the tokens a model call used, the
    /// rows a query read), and settles the difference with the cost charged
    /// up front ([`RateLimit::cost`], [`RateLimit::cost_header`] or
    /// [`RateLimit::cost_fn`]): a penalty of `actual − charged` when the
    /// request cost more, a refund of `charged − actual` when it cost less.
    /// The request was admitted on its up-front cost; the penalty can leave
    /// the key over its limit, denied until the usage drains as its
    /// strategy says.
    ///
    /// The value must be one decimal integer from 0 to 2⁶²
    /// ([`tollgate::Policy::MAX_LIMIT`]), in digits only. A response without the
    /// header, with it more than once, or with any other value leaves the
    /// charge as it was and is counted in [`RateLimit::adjustments`]
    /// (`unread`). What is settled and what is not (exempt keys, shadow
    /// mode, fail-open, the fallback, compound policies, failures) is as
    /// for [`RateLimit::no_charge_when`].
    ///
    /// The header reaches the client unless
    /// [`RateLimit::remove_response_cost_header`] says otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Limiter;
    /// use tollgate_http::RateLimit;
    ///
    /// let limiter = Limiter::builder().limit(100_000).window(Duration::from_secs(3_600)).build()?;
    /// // Each request is admitted on an estimate of 500 tokens, then charged
    /// // what the model reports in `x-tokens-used`.
    /// let config = RateLimit::new(limiter)
    ///     .cost(500)
    ///     .cost_from_response_header("x-tokens-used")
    ///     .remove_response_cost_header(true);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name.
    pub fn cost_from_response_header(mut self, name: &str) -> Self {
        assert_header_name(name);
        self.engine_mut().response_cost.set_header(name);
        self
    }

    /// Whether the header of [`RateLimit::cost_from_response_header`] is
    /// removed from responses before they reach the client (default:
    /// `false`, it is passed on). It is removed whether or not it could be
    /// read, and from every response of an admitted request, whether or not
    /// its charge was settled (a skipped request's response is untouched).
    pub fn remove_response_cost_header(mut self, remove: bool) -> Self {
        self.engine_mut().response_cost.set_remove_header(remove);
        self
    }

    /// How the charges of admitted requests were settled after their
    /// responses so far: refunds, penalties, failures and unreadable cost
    /// headers, counted by this configuration and the clones made from it.
    pub fn adjustments(&self) -> Adjustments {
        self.engine.response_cost.adjustments()
    }

    /// The engine, to configure; copied first when it is shared.
    fn engine_mut(&mut self) -> &mut Engine<B> {
        Arc::make_mut(&mut self.engine)
    }

    /// The engine that decides each request.
    pub(crate) fn engine(&self) -> &Engine<B> {
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
        assert!(Arc::ptr_eq(original.limiters(), changed.limiters()));
    }
}
