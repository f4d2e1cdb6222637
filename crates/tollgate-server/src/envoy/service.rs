//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! Every descriptor of a request is decided together: the answer is
//! OVER_LIMIT when any limited descriptor is over its limit (shadow-mode
//! descriptors excepted), and then no descriptor stays charged. The
//! decision is the core's, [`tollgate::together::allow_all`]: this module
//! matches each descriptor to its rule, hands the core one part per
//! limited descriptor, and writes the core's decisions back as protobuf.
//!
//! - One limited descriptor: one decision, exact (charged only when
//!   admitted).
//! - Several, on Redis (standalone, through Sentinel, or a Cluster when
//!   every descriptor's key lives in one hash slot): one function call
//!   decides them all, atomically across every instance sharing the store:
//!   in request order, each against the charges of the request's earlier
//!   descriptors; when one denies, nothing is charged, and every other
//!   descriptor reports what it alone would get, uncharged. No other
//!   request ever sees a charge that is taken back. Each descriptor's
//!   limiter takes its part as it takes a request of it alone: a
//!   descriptor admitted from its lease asks Redis nothing, and one whose
//!   denial the deny cache holds denies the request without a call (the
//!   descriptors that would have asked are then reported not asked:
//!   code OK, their limit, 0 remaining and no reset, since nothing was
//!   read for them).
//! - Several elsewhere (in memory, across Cluster slots, while a circuit
//!   breaker is open): charged in request order, serialized per key in this
//!   process; at the first denial the charges are given back exactly and
//!   every other descriptor reports what it alone would get. A charge stays
//!   only when its refund fails (the store failed in between) or it was
//!   made by a limiter's in-memory fallback, which a refund does not reach:
//!   both are counted in [`PARTIAL_CHARGES`](crate::metrics::PARTIAL_CHARGES).
//! - A descriptor limited to 0 requests per unit denies the request
//!   without any charge; the others are reported as they stand.
//! - A rule's `shadow_mode` and `quota_mode` are the descriptor's
//!   [`Role`]: the core decides what each does to the request (a shadow
//!   descriptor over its limit reports OK, counted in
//!   [`SHADOW_DENIED`](crate::metrics::SHADOW_DENIED); a request is over
//!   its quotas only when every quota descriptor is, and then nothing
//!   stays charged), and this module translates.
//! - A descriptor that names its own `limit` is limited by it, as
//!   envoyproxy/ratelimit honours it, whatever the domain's file
//!   configures for it: a fixed window of `requests_per_unit` per `unit`,
//!   keyed by the domain and every entry's key and value
//!   ([`Domain::overrides`](tollgate_config::envoy::Domain::overrides)),
//!   never in shadow mode. A limit above 2^32 − 1 cannot be named (the
//!   field is 32 bits); an unknown unit is `INVALID_ARGUMENT`.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeader;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as PbUnit, Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tollgate::together::{self, Role};
use tollgate::{Decision, Limiter};
use tollgate_config::envoy::{override_key, DomainRule as Rule, RateLimit as Limit, Unit};
use tollgate_config::AnyBackend;
use tollgate_http::write_decision_headers;
use tonic::{Request, Response, Status};

use crate::shared::Shared;

/// The gRPC service.
pub(crate) struct EnvoyService {
    pub(crate) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl RateLimitService for EnvoyService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let result = self.decide(request.into_inner()).await;
        let code = match &result {
            Ok(_) => 0,
            Err(status) => status.code() as u16,
        };
        crate::metrics::request_done("grpc", "ShouldRateLimit", code, started);
        result.map(Response::new)
    }
}

/// One descriptor of a request, matched.
struct Planned<'a> {
    /// The configured limit that applies, if any.
    rule: Option<&'a Rule>,
    /// The limit the descriptor names for itself, in place of any rule.
    named: Option<Named>,
    key: Vec<u8>,
    cost: u64,
}

/// A limit a descriptor names for itself (`limit`).
struct Named {
    limiter: Arc<Limiter<AnyBackend>>,
    unit: Unit,
    requests: u32,
}

impl Planned<'_> {
    /// The limiter that decides the descriptor: none for a descriptor no
    /// limit applies to, or an unlimited one.
    fn limiter(&self) -> Option<&Limiter<AnyBackend>> {
        match &self.named {
            Some(named) => Some(&named.limiter),
            None => self.rule?.limiter().map(|l| &**l),
        }
    }

    /// The descriptor's role in its request: its rule's shadow and quota
    /// modes (a limit it names for itself has neither).
    fn role(&self) -> Role {
        let Some(rule) = self.rule.filter(|_| self.named.is_none()) else {
            return Role::Decisive;
        };
        match (rule.rule().shadow, rule.rule().quota) {
            (false, false) => Role::Decisive,
            (false, true) => Role::Quota,
            (true, false) => Role::Shadow,
            (true, true) => Role::ShadowQuota,
        }
    }
}

/// The unit of a descriptor's own limit (none for `UNKNOWN`).
fn named_unit(unit: i32) -> Option<Unit> {
    Unit::parse(PbUnit::try_from(unit).ok()?.as_str_name())
}

fn invalid(message: String) -> Status {
    Status::invalid_argument(message)
}

impl EnvoyService {
    async fn decide(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(invalid("domain: must not be empty".to_owned()));
        }
        if request.descriptors.is_empty() {
            return Err(invalid(
                "descriptors: must hold at least one descriptor".to_owned(),
            ));
        }
        let config = self.shared.config.load();
        let Some(domain) = config.domain(&request.domain) else {
            // An unknown domain limits nothing, as in Envoy's own service.
            return Ok(ok_response(request.descriptors.len()));
        };
        let request_hits = u64::from(request.hits_addend.max(1));
        let mut planned = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            if descriptor.is_negative_hits {
                return Err(invalid(format!(
                    "descriptors[{i}].is_negative_hits: giving units back is not supported"
                )));
            }
            let named = match &descriptor.limit {
                Some(limit) => {
                    let unit = named_unit(limit.unit).ok_or_else(|| {
                        invalid(format!(
                            "descriptors[{i}].limit.unit: {} is not a unit: SECOND, MINUTE, HOUR, DAY, WEEK, \
                             MONTH or YEAR",
                            limit.unit
                        ))
                    })?;
                    let limiter = domain
                        .overrides()
                        .limiter(u64::from(limit.requests_per_unit), Some(unit.window()))
                        .map_err(|err| invalid(format!("descriptors[{i}].limit: {err}")))?;
                    Some(Named {
                        limiter,
                        unit,
                        requests: limit.requests_per_unit,
                    })
                }
                None => None,
            };
            let cost = descriptor.hits_addend.map_or(request_hits, |h| h.value);
            if cost > tollgate::Policy::MAX_LIMIT {
                return Err(invalid(format!(
                    "descriptors[{i}].hits_addend: {cost} exceeds the largest limit, 2^62"
                )));
            }
            let entries = || {
                descriptor
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
            };
            planned.push(match named {
                Some(named) => Planned {
                    rule: None,
                    named: Some(named),
                    key: override_key(entries()),
                    cost,
                },
                None => {
                    let (rule, key) = domain.find_keyed(entries()).unzip();
                    Planned {
                        rule,
                        named: None,
                        key: key.unwrap_or_default(),
                        cost,
                    }
                }
            });
        }
        drop_replaced(&mut planned);
        let (outcomes, denied) = self.outcomes(&planned).await?;
        Ok(self.response(&planned, &outcomes, denied))
    }

    /// Decides every limited descriptor (`None` for the others), and says
    /// whether the request is denied: the core's decision of the parts,
    /// each with its role ([`together::allow_all`]).
    async fn outcomes(&self, planned: &[Planned<'_>]) -> Result<(Vec<Option<Decision>>, bool), Status> {
        let mut outcomes: Vec<Option<Decision>> = vec![None; planned.len()];
        let (at, parts): (Vec<usize>, Vec<together::Part<'_, AnyBackend>>) = planned
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                Some((
                    i,
                    together::Part {
                        limiter: p.limiter()?,
                        key: &p.key,
                        cost: p.cost,
                        role: p.role(),
                    },
                ))
            })
            .unzip();
        let unavailable = |err: tollgate::Error| Status::unavailable(format!("no decision: {err}"));
        let decided = together::allow_all(&parts).await.map_err(unavailable)?;
        metrics::counter!(crate::metrics::PARTIAL_CHARGES).increment(decided.partial_charges);
        for (&i, decision) in at.iter().zip(decided.decisions) {
            outcomes[i] = Some(decision);
        }
        Ok((outcomes, decided.denied))
    }

    fn response(
        &self,
        planned: &[Planned<'_>],
        outcomes: &[Option<Decision>],
        denied: bool,
    ) -> RateLimitResponse {
        let code = if denied { Code::OverLimit } else { Code::Ok };
        let mut response = RateLimitResponse {
            overall_code: code as i32,
            ..Default::default()
        };
        // Limited descriptors with their decision and whether they deny.
        let mut decided: Vec<(&Planned<'_>, &Decision, bool)> = Vec::new();
        for (p, outcome) in planned.iter().zip(outcomes) {
            let (unit, requests, name) = match counted_limit(p) {
                ControlFlow::Continue(limit) => limit,
                ControlFlow::Break(status) => {
                    response.statuses.push(status);
                    continue;
                }
            };
            let Some(d) = outcome else {
                response.statuses.push(ok_status());
                continue;
            };
            let code = if d.allowed { Code::Ok } else { Code::OverLimit };
            // Over its limit in shadow mode: reported OK by the core, and
            // counted for the rule's resource; no headers come from it.
            let shadowed = d.shadow_denied && p.role().is_shadow();
            if let (true, Some(rule)) = (shadowed, p.rule) {
                metrics::counter!(crate::metrics::SHADOW_DENIED, "resource" => rule.rule().resource.clone())
                    .increment(1);
            }
            if !shadowed {
                decided.push((p, d, code == Code::OverLimit));
            }
            response.statuses.push(DescriptorStatus {
                code: code as i32,
                current_limit: Some(PbRateLimit {
                    name: name.unwrap_or_default(),
                    requests_per_unit: requests,
                    unit: pb_unit(unit) as i32,
                }),
                limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(pb_duration(d.reset)),
                quota: None,
            });
        }
        self.add_headers(decided, &mut response);
        response
    }

    /// Adds to `response` the rate-limit headers of one of the `decided`
    /// descriptors (with their decision and whether they deny): the denial
    /// with the longest wait when the response denies, else the descriptor
    /// with the fewest units left.
    #[inline]
    fn add_headers(&self, decided: Vec<(&Planned<'_>, &Decision, bool)>, response: &mut RateLimitResponse) {
        // The headers report the denial with the longest wait (none: never),
        // or when admitted the descriptor with the fewest units left.
        let denying = response.overall_code == Code::OverLimit as i32;
        let reported = decided
            .into_iter()
            .filter(|(_, _, denies)| *denies == denying)
            .max_by_key(|(_, d, _)| {
                if denying {
                    (d.retry_after.is_none(), d.retry_after.unwrap_or_default(), 0)
                } else {
                    (false, Duration::ZERO, u64::MAX - d.remaining)
                }
            });
        if let Some((p, decision, _)) = reported {
            // Every decided descriptor has a limiter.
            if let Some(policy) = p.limiter().map(|l| *l.policy()) {
                let mut headers = tollgate_http::http::HeaderMap::new();
                let resource = p.rule.map_or("limit", |r| r.rule().resource.as_str());
                write_decision_headers(
                    self.shared.envoy_headers,
                    decision,
                    resource,
                    &policy,
                    &mut headers,
                );
                response.response_headers_to_add = headers
                    .iter()
                    .map(|(name, value)| PbHeader {
                        key: name.as_str().to_owned(),
                        value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                        raw_value: Vec::new(),
                    })
                    .collect();
            }
        }
    }
}

/// The limit a planned descriptor counts under, as its status names it
/// (unit, requests per unit and the limit's name): the one it names for
/// itself, else its rule's. A descriptor without a limit to count under
/// (no rule, or an unlimited one) breaks with its status, always OK.
#[inline]
fn counted_limit(p: &Planned<'_>) -> ControlFlow<DescriptorStatus, (Unit, u32, Option<String>)> {
    ControlFlow::Continue(match (&p.named, p.rule) {
        (Some(named), _) => (named.unit, named.requests, None),
        (None, None) => return ControlFlow::Break(ok_status()),
        (None, Some(rule)) => match rule.rule().limit {
            Limit::Unlimited => {
                return ControlFlow::Break(DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                })
            }
            Limit::PerUnit { unit, requests, .. } => (unit, requests, rule.rule().name.clone()),
        },
    })
}

/// Drops the limits that another matched limit of the request replaces
/// (`rate_limit.replaces` naming their `rate_limit.name`).
fn drop_replaced(planned: &mut [Planned<'_>]) {
    let replaced: HashSet<&str> = planned
        .iter()
        .filter_map(|p| p.rule)
        .flat_map(|r| r.rule().replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for p in planned {
        if p.rule
            .is_some_and(|r| r.rule().name.as_deref().is_some_and(|n| replaced.contains(n)))
        {
            p.rule = None;
        }
    }
}

fn ok_status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

fn ok_response(descriptors: usize) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: (0..descriptors).map(|_| ok_status()).collect(),
        ..Default::default()
    }
}

fn pb_unit(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

fn pb_duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}
