//! Admin routes: what the service is configured with, and the per-key
//! operations ([`operations`]). They are open on a loopback listener without
//! a token, to clients that are not web pages ([`guard`]); with
//! `--admin-token-file` every admin request must carry
//! `Authorization: Bearer <token>`, compared in constant time. The server
//! refuses to start with admin routes open on any other address.
//!
//! Adding a route is one `.route(...)` line in [`router`] (an operation:
//! one entry of [`OPERATIONS`]) and one entry of [`ROUTES`].

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use tollgate_config::envoy::RateLimit;
use tollgate_config::PolicySet;

use crate::http::decide::ceil_millis;
use crate::http::error::json_response;
use crate::http::guard::{self, Route};
use crate::http::operations::{self, OPERATIONS};
use crate::http::top;
use crate::shared::Shared;

/// The admin routes, listed in start-up errors.
pub(crate) const ROUTES: &[&str] = &[
    "GET /v1/policies",
    "GET /v1/top",
    "POST /v1/reset",
    "POST /v1/block",
    "POST /v1/refund",
    "POST /v1/penalty",
];

/// The admin routes behind their access check.
pub(crate) fn router(shared: Arc<Shared>) -> Router<Arc<Shared>> {
    let mut router = Router::new()
        .route("/v1/policies", get(policies))
        .route("/v1/top", get(top::handler));
    for (path, kind) in OPERATIONS {
        router = router.route(path, operations::route(*kind));
    }
    router.route_layer(middleware::from_fn_with_state(
        (shared, Route::Admin),
        guard::check,
    ))
}

/// One limit of a policy.
#[derive(Serialize)]
struct LimitBody {
    strategy: &'static str,
    limit: u64,
    window_ms: u64,
}

/// A policy file's policy: a resource's, or the default.
#[derive(Serialize)]
struct PolicyBody {
    limits: Vec<LimitBody>,
    /// The concurrency limit a resource combines with its rates (`limits`);
    /// absent for every other policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_flight: Option<InFlightBody>,
}

/// The concurrency limit of a resource that combines it with its rates:
/// the units its requests may hold at once, and how long a permit lasts.
#[derive(Serialize)]
struct InFlightBody {
    limit: u64,
    ttl_ms: u64,
}

/// An Envoy limit.
#[derive(Serialize)]
struct EnvoyRuleBody<'a> {
    resource: &'a str,
    /// `second` … `year`; absent when unlimited.
    unit: Option<&'static str>,
    requests_per_unit: Option<u32>,
    /// As a tollgate limit: fixed window, `requests_per_unit` per unit.
    window_ms: Option<u64>,
    unlimited: bool,
    shadow_mode: bool,
    name: Option<&'a str>,
    replaces: &'a [String],
}

#[derive(Serialize)]
struct EnvoyDomainBody<'a> {
    domain: &'a str,
    file: &'a str,
    rules: Vec<EnvoyRuleBody<'a>>,
}

#[derive(Serialize)]
struct PoliciesBody<'a> {
    /// Where state lives (credentials hidden).
    storage: String,
    file: Option<&'a str>,
    default: Option<PolicyBody>,
    resources: std::collections::BTreeMap<Box<str>, PolicyBody>,
    envoy: Vec<EnvoyDomainBody<'a>>,
}

/// The body of `policy`, and of the concurrency limit `in_flight` a
/// resource combines with it.
fn policy_body(policy: &tollgate::Policy, in_flight: Option<&tollgate::Policy>) -> PolicyBody {
    PolicyBody {
        in_flight: in_flight.map(|slots| InFlightBody {
            limit: slots.limits()[0].limit(),
            ttl_ms: ceil_millis(slots.limits()[0].window()),
        }),
        limits: policy
            .limits()
            .iter()
            .map(|l| LimitBody {
                strategy: l.strategy().name(),
                limit: l.limit(),
                window_ms: ceil_millis(l.window()),
            })
            .collect(),
    }
}

fn policies_body(config: &PolicySet) -> PoliciesBody<'_> {
    let policies = config.policies();
    let mut envoy: Vec<EnvoyDomainBody<'_>> = config
        .domains()
        .map(|(name, domain)| EnvoyDomainBody {
            domain: name,
            file: domain.file(),
            rules: domain
                .rules()
                .iter()
                .map(|rule| {
                    let rule = rule.rule();
                    let (unit, requests) = match rule.limit {
                        RateLimit::Unlimited => (None, None),
                        RateLimit::PerUnit { unit, requests, .. } => (Some(unit), Some(requests)),
                    };
                    EnvoyRuleBody {
                        resource: &rule.resource,
                        unit: unit.map(|u| u.name()),
                        requests_per_unit: requests,
                        window_ms: unit.map(|u| ceil_millis(u.window())),
                        unlimited: unit.is_none(),
                        shadow_mode: rule.shadow,
                        name: rule.name.as_deref(),
                        replaces: &rule.replaces,
                    }
                })
                .collect(),
        })
        .collect();
    envoy.sort_by(|a, b| a.domain.cmp(b.domain));
    PoliciesBody {
        storage: config.storage().to_string(),
        file: config.policy_file().map(|f| f.origin()),
        default: policies.map(|p| policy_body(p.limiter("").policy(), None)),
        resources: policies
            .map(|p| {
                p.resources()
                    .into_iter()
                    .map(|(name, limiter)| {
                        let in_flight = p.in_flight(&name);
                        let body = policy_body(limiter.policy(), in_flight.as_ref().map(|l| l.policy()));
                        (name, body)
                    })
                    .collect()
            })
            .unwrap_or_default(),
        envoy,
    }
}

/// `GET /v1/policies`: the effective configuration.
async fn policies(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.config.load();
    json_response(StatusCode::OK, &policies_body(&config))
}
