//! The framework-neutral part of the middleware: from a request to either
//! "call the service, then add these headers" or "send this reply".

use std::borrow::Cow;
use std::sync::Arc;

use crate::cost::Cost;
use crate::cost_error::CostError;
use crate::headers::{write_denial, HeaderMode, RateHeaders};
use crate::ip::IpGrouping;
use crate::key::{peer_key, Key, KeyExtractor, MissingKey};
use crate::key_error::KeyError;
use crate::limits::Limits;
use crate::reply::{GrpcMode, Reply};
use crate::reply_context::{CostRejected, Denied, Failure, KeyRejected, ReplyContext, ReplyFormat};
use crate::request::RequestInfo;
use crate::resource::ResourceExtractor;

pub(crate) type DeniedFn = dyn Fn(&Denied<'_>) -> Reply + Send + Sync;
pub(crate) type FailureFn = dyn Fn(&Failure<'_>) -> Reply + Send + Sync;
pub(crate) type KeyErrorFn = dyn Fn(&KeyRejected<'_>) -> Reply + Send + Sync;
pub(crate) type CostErrorFn = dyn Fn(&CostRejected<'_>) -> Reply + Send + Sync;

/// The framework-neutral part of the middleware, shared by every request:
/// the configuration, and from a request to a [`Verdict`].
pub(crate) struct Engine<L> {
    pub(crate) limits: Arc<L>,
    pub(crate) key: KeyExtractor,
    pub(crate) missing: MissingKey,
    pub(crate) resource: ResourceExtractor,
    pub(crate) cost: Cost,
    pub(crate) grouping: IpGrouping,
    pub(crate) headers: HeaderMode,
    pub(crate) format: ReplyFormat,
    pub(crate) grpc: GrpcMode,
    pub(crate) on_denied: Option<Arc<DeniedFn>>,
    pub(crate) on_failure: Option<Arc<FailureFn>>,
    pub(crate) on_key_error: Option<Arc<KeyErrorFn>>,
    pub(crate) on_cost_error: Option<Arc<CostErrorFn>>,
}

impl<L> Clone for Engine<L> {
    fn clone(&self) -> Self {
        Self {
            limits: self.limits.clone(),
            key: self.key.clone(),
            missing: self.missing,
            resource: self.resource.clone(),
            cost: self.cost.clone(),
            grouping: self.grouping,
            headers: self.headers,
            format: self.format,
            grpc: self.grpc,
            on_denied: self.on_denied.clone(),
            on_failure: self.on_failure.clone(),
            on_key_error: self.on_key_error.clone(),
            on_cost_error: self.on_cost_error.clone(),
        }
    }
}

impl<L> std::fmt::Debug for Engine<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("key", &self.key)
            .field("missing_key", &self.missing)
            .field("resource", &self.resource)
            .field("cost", &self.cost)
            .field("ip_grouping", &self.grouping)
            .field("headers", &self.headers)
            .field("format", &self.format)
            .field("grpc", &self.grpc)
            .finish_non_exhaustive()
    }
}

/// A request's key, resource and cost, borrowed from the request where
/// possible.
pub(crate) struct Prepared<'a> {
    key: Key<'a>,
    resource: Cow<'a, str>,
    cost: u64,
    grpc: bool,
}

/// What to do with a request.
pub(crate) enum Verdict {
    /// Call the service and add these headers to its response.
    Allow(RateHeaders),
    /// Answer with this reply instead.
    Reply(Reply),
}

impl<L> Engine<L> {
    pub(crate) fn new(limits: Arc<L>) -> Self {
        Self {
            limits,
            key: KeyExtractor::default(),
            missing: MissingKey::default(),
            resource: ResourceExtractor::default(),
            cost: Cost::default(),
            grouping: IpGrouping::default(),
            headers: HeaderMode::default(),
            format: ReplyFormat::default(),
            grpc: GrpcMode::default(),
            on_denied: None,
            on_failure: None,
            on_key_error: None,
            on_cost_error: None,
        }
    }
}

impl<L: Limits> Engine<L> {
    /// Takes key, resource and cost from `req` (no I/O); a reply when there
    /// is no key or no valid cost. Kept apart from [`Engine::verdict`] so
    /// that the request view, which need not be `Sync`, is not held across
    /// an await.
    pub(crate) fn prepare<'a>(&self, req: &RequestInfo<'a>) -> Result<Prepared<'a>, Box<Reply>> {
        let grpc = match self.grpc {
            GrpcMode::Detect => req.is_grpc(),
            GrpcMode::Always => true,
            GrpcMode::Never => false,
        };
        let resource = if self.limits.uses_resources() {
            self.resource.extract(req)
        } else {
            Cow::Borrowed("")
        };
        let key = match self.key.extract(req, &self.grouping) {
            Ok(key) => key,
            Err(error) => match self.missing {
                MissingKey::PeerIp => peer_key(req, &self.grouping)
                    .map_err(|e| Box::new(self.key_error(&e, &resource, grpc)))?,
                MissingKey::Reject => return Err(Box::new(self.key_error(&error, &resource, grpc))),
            },
        };
        let cost = match self.cost.of(req) {
            Ok(cost) => cost,
            Err(error) => return Err(Box::new(self.cost_error(&error, &key, &resource, grpc))),
        };
        Ok(Prepared {
            key,
            resource,
            cost,
            grpc,
        })
    }

    /// Whether [`Engine::decide_now`] decides (the limiter answers without
    /// waiting, as in memory). Used by the tower service, which calls the
    /// inner service from `call` when it can.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn can_check(&self) -> bool {
        self.limits.can_check()
    }

    /// The verdict for `p` without waiting, when the limiter can give one.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn verdict_now(&self, p: &Prepared<'_>) -> Option<Verdict> {
        let decision = self.limits.check_n(&p.resource, p.key.as_bytes(), p.cost)?;
        Some(self.to_verdict(Ok(decision), p))
    }

    /// Asks the limiter and maps its answer to a verdict.
    pub(crate) async fn verdict(&self, p: &Prepared<'_>) -> Verdict {
        let answer = self.limits.allow_n(&p.resource, p.key.as_bytes(), p.cost).await;
        self.to_verdict(answer, p)
    }

    /// Maps the limiter's answer to a verdict.
    fn to_verdict(&self, answer: Result<tollgate::Decision, tollgate::Error>, p: &Prepared<'_>) -> Verdict {
        let key = p.key.as_bytes();
        match answer {
            // Admitted only because the backend failed under fail-open: the
            // limiter knows nothing of the key's state, so no rate-limit
            // headers are sent rather than figures it never computed.
            Ok(decision) if decision.fail_open => Verdict::Allow(RateHeaders::default()),
            Ok(decision) => {
                let headers =
                    RateHeaders::for_decision(self.headers, &decision, || self.limits.policy(&p.resource));
                if decision.allowed {
                    return Verdict::Allow(headers);
                }
                let denied: Denied<'_> = self.context(&decision, key, &p.resource, p.grpc);
                let mut reply = match &self.on_denied {
                    Some(handler) => handler(&denied),
                    None => Reply::for_denied(&denied),
                };
                write_denial(headers, &decision, reply.headers_mut());
                Verdict::Reply(reply)
            }
            Err(error) => {
                let failure: Failure<'_> = self.context(&error, key, &p.resource, p.grpc);
                Verdict::Reply(match &self.on_failure {
                    Some(handler) => handler(&failure),
                    None => Reply::for_failure(&failure),
                })
            }
        }
    }

    fn key_error(&self, error: &KeyError, resource: &str, grpc: bool) -> Reply {
        let rejected: KeyRejected<'_> = self.context(error, b"", resource, grpc);
        match &self.on_key_error {
            Some(handler) => handler(&rejected),
            None => Reply::for_key_error(&rejected),
        }
    }

    fn cost_error(&self, error: &CostError, key: &Key<'_>, resource: &str, grpc: bool) -> Reply {
        let rejected: CostRejected<'_> = self.context(error, key.as_bytes(), resource, grpc);
        match &self.on_cost_error {
            Some(handler) => handler(&rejected),
            None => Reply::for_cost_error(&rejected),
        }
    }

    fn context<'a, W: Copy>(
        &self,
        why: W,
        key: &'a [u8],
        resource: &'a str,
        grpc: bool,
    ) -> ReplyContext<'a, W> {
        ReplyContext::new(why, key, resource, self.format, grpc)
    }
}
