//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! Every descriptor of a request is decided together: the answer is
//! OVER_LIMIT when any limited descriptor is over its limit (shadow-mode
//! descriptors excepted), and then no descriptor stays charged.
//!
//! - One limited descriptor: one decision, exact (charged only when
//!   admitted).
//! - Several, on Redis (standalone, through Sentinel, or a Cluster when
//!   every descriptor's key lives in one hash slot): one function call
//!   decides them all, atomically across every instance sharing the store
//!   ([`tollgate::together`]): in request order, each against the charges
//!   of the request's earlier descriptors; when one denies, nothing is
//!   charged, and every other descriptor reports what it alone would get,
//!   uncharged. No other request ever sees a charge that is taken back.
//! - Several elsewhere (in memory, across Cluster slots, while a circuit
//!   breaker is open): each is charged in request order (a decision with
//!   its cost, against the charges of the request's earlier descriptors on
//!   the same resource and key). At the first denial the descriptors
//!   already charged get a refund of exactly the cost each was charged,
//!   which restores their state exactly (a refund right after a charge
//!   undoes it, per SEMANTICS.md's per-key operations); the descriptors
//!   after it are reported from a peek, not charged. This holds with Redis
//!   shared by several instances too: nothing is left charged whatever
//!   other instances do in between. Between a charge and its refund
//!   another request may see the charge and be denied when it would
//!   otherwise have been admitted: conservative, never admitting more than
//!   the limits.
//!   A charge stays only when its refund fails (the store failed in
//!   between) or it was made by a limiter's in-memory fallback, which a
//!   refund does not reach: both are counted in
//!   [`PARTIAL_CHARGES`](crate::metrics::PARTIAL_CHARGES).
//! - Requests of several limited descriptors decided one by one that share a resource and
//!   key in this process are serialized through [`KeyLocks`] for the whole
//!   step (a request of one limited descriptor takes no lock: it is one
//!   decision). With refunds the
//!   outcome is safe without it, but not exact: a request that only
//!   overlaps a denied one in time could be denied by its passing charge.
//!   Holding the locks makes this process's Envoy requests decide as if
//!   one after the other, so with in-memory state every answer is the one
//!   a sequential replay gives; the cost is waiting only on requests that
//!   share a key's lock.
//! - A descriptor limited to 0 requests per unit denies the request
//!   without any charge; the others are reported from a peek.
//!
//! [`KeyLocks`]: tollgate::backend::KeyLocks

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeader;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as PbUnit, Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tollgate::{together, Decision, Policy, Strategy};
use tollgate_config::envoy::{descriptor_key, DomainRule as Rule, RateLimit as Limit, Unit};
use tollgate_config::AnyBackend;
use tollgate_http::{write_decision_headers, HeaderMode};
use tonic::{Request, Response, Status};

use crate::shared::Shared;

/// The limiter of an Envoy limit.
type SharedLimiter = std::sync::Arc<tollgate::Limiter<AnyBackend>>;

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
        crate::metrics::request_done("grpc", "ShouldRateLimit".to_owned(), code, started);
        result.map(Response::new)
    }
}

/// One descriptor of a request, matched.
struct Planned<'a> {
    rule: Option<&'a Rule>,
    key: Vec<u8>,
    cost: u64,
}

/// A limited descriptor's result.
struct Outcome {
    decision: Decision,
    /// Over its limit (before shadow mode turns it into OK).
    over: bool,
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
            if descriptor.limit.is_some() {
                return Err(invalid(format!(
                    "descriptors[{i}].limit: limit overrides in requests are not supported; configure the \
                     limit in the domain's file"
                )));
            }
            let cost = descriptor.hits_addend.map_or(request_hits, |h| h.value);
            if cost > tollgate::MAX_LIMIT {
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
            planned.push(Planned {
                rule: domain.find(entries()),
                key: descriptor_key(descriptor.entries.iter().map(|e| e.value.as_str())),
                cost,
            });
        }
        drop_replaced(&mut planned);
        let outcomes = self.outcomes(&planned).await?;
        Ok(self.response(&planned, &outcomes))
    }

    /// Decides every limited descriptor; `None` for the others.
    async fn outcomes(&self, planned: &[Planned<'_>]) -> Result<Vec<Option<Outcome>>, Status> {
        let limited: Vec<(usize, &Rule, &SharedLimiter)> = planned
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let rule = p.rule?;
                rule.limiter().map(|l| (i, rule, l))
            })
            .collect();
        let mut outcomes: Vec<Option<Outcome>> = planned.iter().map(|p| self.blocked(p)).collect();
        let blocked = planned
            .iter()
            .zip(&outcomes)
            .any(|(p, o)| o.is_some() && p.rule.is_some_and(|r| !r.rule().shadow));
        let unavailable = |err: tollgate::Error| Status::unavailable(format!("no decision: {err}"));
        // Several limited descriptors in one step where the store can (see
        // the module docs): no charge to give back, no lock.
        if limited.len() > 1 && !blocked {
            let parts: Vec<together::Part<'_, AnyBackend>> = limited
                .iter()
                .map(|(i, rule, limiter)| together::Part {
                    limiter: limiter.as_ref(),
                    key: &planned[*i].key,
                    cost: planned[*i].cost,
                    decisive: !rule.rule().shadow,
                })
                .collect();
            if let Some(result) = together::decide(&parts).await {
                let decisions = result.map_err(unavailable)?;
                let denied = limited
                    .iter()
                    .zip(&decisions)
                    .any(|((_, rule, _), d)| !d.allowed && !rule.rule().shadow);
                for ((i, _, _), decision) in limited.iter().zip(decisions) {
                    // A fallback's charge in a denied request stays.
                    if denied && decision.allowed && decision.fallback {
                        metrics::counter!(crate::metrics::PARTIAL_CHARGES).increment(1);
                    }
                    outcomes[*i] = Some(Outcome {
                        over: !decision.allowed,
                        decision,
                    });
                }
                return Ok(outcomes);
            }
        }
        // One limited descriptor is one decision: the limiter alone makes it
        // exact, and a hot key's requests must not queue behind each other's
        // round trips. Several are serialized per key (see the module docs).
        let locks = &self.shared.envoy_locks;
        let _guards = if limited.len() > 1 {
            Some(
                locks
                    .lock_all(
                        limited
                            .iter()
                            .map(|(i, rule, _)| locks.index((&rule.rule().resource, &planned[*i].key)))
                            .collect(),
                    )
                    .await,
            )
        } else {
            None
        };
        if let [(i, _, limiter)] = limited[..] {
            if !blocked {
                let decision = limiter
                    .allow_n(&planned[i].key, planned[i].cost)
                    .await
                    .map_err(unavailable)?;
                outcomes[i] = Some(Outcome {
                    over: !decision.allowed,
                    decision,
                });
                return Ok(outcomes);
            }
        }
        if blocked {
            // A descriptor limited to 0 denies: nothing is charged; the
            // others are reported as they stand.
            for (i, _, limiter) in &limited {
                let peek = limiter.allow_n(&planned[*i].key, 0).await.map_err(unavailable)?;
                outcomes[*i] = Some(peeked(peek, planned[*i].cost, limiter.policy()));
            }
            return Ok(outcomes);
        }
        // Charge in request order; at the first denial, give back what was
        // charged and report the rest as they stand.
        let mut charged: Vec<(&SharedLimiter, &[u8], u64)> = Vec::new();
        // The outcomes of the charged descriptors, by index into `outcomes`.
        let mut charged_at: Vec<usize> = Vec::new();
        let mut denied = false;
        let mut unrefundable = 0;
        for (i, rule, limiter) in &limited {
            let (key, cost) = (planned[*i].key.as_slice(), planned[*i].cost);
            if denied {
                let peek = limiter.allow_n(key, 0).await.map_err(unavailable)?;
                outcomes[*i] = Some(peeked(peek, cost, limiter.policy()));
                continue;
            }
            let decision = match limiter.allow_n(key, cost).await {
                Ok(decision) => decision,
                Err(err) => {
                    let _ = refund(&charged).await;
                    return Err(unavailable(err));
                }
            };
            if !decision.allowed && !rule.rule().shadow {
                denied = true;
            } else if charges(&decision) {
                charged.push((limiter, key, cost));
                charged_at.push(*i);
            } else if decision.allowed && decision.fallback {
                unrefundable += 1;
            }
            outcomes[*i] = Some(Outcome {
                over: !decision.allowed,
                decision,
            });
        }
        if denied {
            let refunded = refund(&charged).await;
            metrics::counter!(crate::metrics::PARTIAL_CHARGES).increment(unrefundable);
            // A refunded descriptor reports its state after the refund, as
            // it stands (the contract: each limit's figures from its state
            // after the decision): a refund right after a charge gives back
            // exactly the units the charge took.
            for ((i, (_, _, cost)), given_back) in charged_at.iter().zip(&charged).zip(refunded) {
                if let (Some(outcome), true) = (&mut outcomes[*i], given_back) {
                    let d = &mut outcome.decision;
                    d.remaining = d.remaining.saturating_add(*cost).min(d.limit);
                }
            }
        }
        Ok(outcomes)
    }

    /// The outcome of a descriptor whose limit is 0 requests per unit:
    /// always over, until the end of the current unit.
    fn blocked(&self, planned: &Planned<'_>) -> Option<Outcome> {
        let rule = planned.rule?;
        let Limit::PerUnit { unit, requests: 0 } = rule.rule().limit else {
            return None;
        };
        let window = unit.window().as_nanos() as u64;
        let reset = Duration::from_nanos(window - self.shared.clock.now_nanos() % window);
        Some(Outcome {
            decision: Decision::new(false, 0, 0, reset, None),
            over: true,
        })
    }

    fn response(&self, planned: &[Planned<'_>], outcomes: &[Option<Outcome>]) -> RateLimitResponse {
        let mut response = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        // Limited descriptors with their decision and whether they deny.
        let mut decided: Vec<(&Rule, &Decision, bool)> = Vec::new();
        for (p, outcome) in planned.iter().zip(outcomes) {
            let Some(rule) = p.rule else {
                response.statuses.push(ok_status());
                continue;
            };
            let (unit, requests) = match rule.rule().limit {
                Limit::Unlimited => {
                    response.statuses.push(DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: u32::MAX,
                        ..Default::default()
                    });
                    continue;
                }
                Limit::PerUnit { unit, requests } => (unit, requests),
            };
            let Some(outcome) = outcome else {
                response.statuses.push(ok_status());
                continue;
            };
            let mut code = if outcome.over { Code::OverLimit } else { Code::Ok };
            if outcome.over && rule.rule().shadow {
                metrics::counter!(crate::metrics::SHADOW_DENIED, "resource" => rule.rule().resource.clone())
                    .increment(1);
                code = Code::Ok;
            }
            if code == Code::OverLimit {
                response.overall_code = Code::OverLimit as i32;
            }
            let d = &outcome.decision;
            if code == Code::OverLimit || !outcome.over {
                decided.push((rule, d, code == Code::OverLimit));
            }
            response.statuses.push(DescriptorStatus {
                code: code as i32,
                current_limit: Some(PbRateLimit {
                    name: rule.rule().name.clone().unwrap_or_default(),
                    requests_per_unit: requests,
                    unit: pb_unit(unit) as i32,
                }),
                limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(pb_duration(d.reset)),
                quota: None,
            });
        }
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
        if let Some((rule, decision, _)) = reported {
            let policy = rule.limiter().map_or_else(
                || {
                    let window = match rule.rule().limit {
                        Limit::PerUnit { unit, .. } => unit.window(),
                        Limit::Unlimited => Duration::from_secs(1),
                    };
                    // Only named in the IETF draft's fields, not written here.
                    Policy::new(Strategy::FixedWindow, 1, window).ok()
                },
                |l| Some(*l.policy()),
            );
            if let Some(policy) = policy {
                let mut headers = tollgate_http::http::HeaderMap::new();
                write_decision_headers(
                    HeaderMode::RateLimit,
                    decision,
                    &rule.rule().resource,
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
        response
    }
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

/// The outcome of a descriptor left undecided because the request is
/// denied, from a peek: over when fewer than `cost` units are left, with
/// the denial a fixed-window limit would give (the units come back when
/// the window ends; never, for a cost above the limit).
fn peeked(peek: Decision, cost: u64, policy: &Policy) -> Outcome {
    let over = !peek.fail_open && peek.remaining < cost;
    if !over {
        return Outcome { decision: peek, over };
    }
    let fits = policy.limits().iter().all(|l| cost <= l.limit());
    let mut denied = peek;
    denied.allowed = false;
    denied.retry_after = fits.then_some(peek.reset);
    Outcome {
        decision: denied,
        over,
    }
}

/// Whether an admission charged the store: not when the limiter failed
/// open, decided on its in-memory fallback (that charge stays in the
/// fallback's memory), admitted in shadow mode what it would deny, or the
/// key's list decided.
fn charges(decision: &Decision) -> bool {
    decision.allowed
        && !decision.fail_open
        && !decision.fallback
        && !decision.shadow_denied
        && decision.listed.is_none()
}

/// Gives back every charge of a denied request, each exactly its cost. A
/// refund that fails (the store failed in between) leaves that charge in
/// place, counted in [`PARTIAL_CHARGES`](crate::metrics::PARTIAL_CHARGES).
/// Whether each was given back is returned in order.
async fn refund(charged: &[(&SharedLimiter, &[u8], u64)]) -> Vec<bool> {
    let mut given_back = Vec::with_capacity(charged.len());
    for (limiter, key, cost) in charged {
        match limiter.refund(key, *cost).await {
            Ok(()) => given_back.push(true),
            Err(err) => {
                tracing::warn!(%err, "a denied Envoy request's charge could not be given back");
                metrics::counter!(crate::metrics::PARTIAL_CHARGES).increment(1);
                given_back.push(false);
            }
        }
    }
    given_back
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
