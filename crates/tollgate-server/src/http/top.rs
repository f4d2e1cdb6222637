//! `GET /v1/top`, an admin route: who is limited right now. The keys of one
//! policy with the most denied requests, admitted units or shadow-denied
//! requests over the last minute ([`tollgate::top::TopKeys`]), each with what a
//! charge-free decision would leave it now.
//!
//! Query parameters: `resource` (a policy file's resource, `default`, or
//! an Envoy limit's resource as `GET /v1/policies` lists it; the policy
//! file's default policy when absent), `by` (`denied`, the default,
//! `admitted` or `shadow_denied`) and `n` (1 to [`MAX_N`], default
//! [`DEFAULT_N`]). The answer:
//!
//! ```json
//! {"resource": "login", "by": "denied", "window_s": 60, "capacity": 1000,
//!  "error_bound": 0,
//!  "keys": [{"key": "203.0.113.7", "denied": 412, "admitted": 10,
//!            "shadow_denied": 0, "remaining": 0, "error": 0, "cut": false}]}
//! ```
//!
//! A count is never below the true one and at most `error` above it
//! (`error_bound` for every key); `cut` keys are the start of longer keys,
//! counted together, and have `remaining: null`, as have keys whose store
//! did not answer. 400 names a wrong parameter, 404 an unknown resource,
//! 409 a policy that keeps no top keys (`top_keys: false`).
//!
//! `by=in_flight`, on a concurrency policy, lists the keys holding the
//! most units in flight instead ([`crate::holders`]): `{"resource", "by",
//! "capacity", "keys": [{"key", "in_flight", "limit", "answered_ms_ago",
//! "expires_ms", "cut"}]}`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate::top::TopMetric;
use tollgate::Limiter;
use tollgate_config::{AnyBackend, PolicySet};

use crate::http::error::{json_response, ApiError};
use crate::shared::Shared;

/// Keys listed unless `n` says otherwise.
pub(crate) const DEFAULT_N: usize = 20;
/// The most keys one request lists.
pub(crate) const MAX_N: usize = 1_000;

/// The query parameters it accepts.
const PARAMETERS: &[&str] = &["resource", "by", "n"];

#[derive(Serialize)]
struct TopBody<'a> {
    resource: &'a str,
    by: &'static str,
    window_s: u64,
    capacity: usize,
    error_bound: u64,
    keys: Vec<KeyBody>,
}

#[derive(Serialize)]
struct KeyBody {
    key: String,
    denied: u64,
    admitted: u64,
    shadow_denied: u64,
    /// What a charge-free decision leaves the key now; `null` for a cut
    /// key or when the store did not answer.
    remaining: Option<u64>,
    error: u64,
    cut: bool,
}

/// The keys of a concurrency policy holding the most units in flight
/// ([`crate::holders`]).
#[derive(Serialize)]
struct HoldersBody<'a> {
    resource: &'a str,
    by: &'static str,
    capacity: usize,
    keys: Vec<HolderBody>,
}

#[derive(Serialize)]
struct HolderBody {
    key: String,
    /// The units the store said the key held at its latest acquire,
    /// release or extend through this replica.
    in_flight: u64,
    limit: u64,
    /// How long ago that answer was.
    answered_ms_ago: u64,
    /// The time until every permit it counted expires, at the latest.
    expires_ms: u64,
    cut: bool,
}

/// What keys are ranked by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    /// A metric of the limiter's top keys.
    Metric(TopMetric),
    /// The units a key holds in flight (a concurrency policy's).
    InFlight,
}

impl By {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            IN_FLIGHT => Some(By::InFlight),
            _ => TopMetric::from_name(name).map(By::Metric),
        }
    }
}

/// The name of [`By::InFlight`].
const IN_FLIGHT: &str = "in_flight";

/// What was asked.
struct Asked {
    resource: Option<String>,
    by: By,
    n: usize,
}

/// The query's parameters, each checked.
fn asked(pairs: Vec<(String, String)>) -> Result<Asked, ApiError> {
    let mut asked = Asked {
        resource: None,
        by: By::Metric(TopMetric::Denied),
        n: DEFAULT_N,
    };
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in &pairs {
        let Some(&known) = PARAMETERS.iter().find(|p| **p == name) else {
            return Err(ApiError::field(
                name,
                format!(
                    "is not a parameter of /v1/top; it takes {}",
                    PARAMETERS.join(", ")
                ),
            ));
        };
        if seen.contains(&known) {
            return Err(ApiError::field(
                known,
                format!("is given twice; /v1/top takes one {known}"),
            ));
        }
        seen.push(known);
        match known {
            "resource" => asked.resource = Some(value.clone()),
            "by" => {
                asked.by = By::from_name(value).ok_or_else(|| {
                    ApiError::field(
                        "by",
                        format!(
                            "{value:?} is not denied, admitted, shadow_denied or in_flight, what keys can be ranked by"
                        ),
                    )
                })?;
            }
            _ => {
                asked.n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_N).contains(n))
                    .ok_or_else(|| {
                        ApiError::field("n", format!("{value:?} is not a whole number from 1 to {MAX_N}"))
                    })?;
            }
        }
    }
    Ok(asked)
}

/// The limiter of `resource`: the policy file's resource or default, else
/// an Envoy limit's.
fn limiter<'a>(
    config: &'a PolicySet,
    resource: Option<&'a str>,
) -> Result<(&'a str, Arc<Limiter<AnyBackend>>), ApiError> {
    let policies = config.policies();
    let Some(resource) = resource else {
        return match policies {
            Some(p) => Ok((tollgate::Limiters::DEFAULT_POLICY_NAME, p.limiter(""))),
            None => Err(ApiError::field(
                "resource",
                "is required: no policy file is loaded, so there is no default policy; name an \
                 Envoy limit's resource as GET /v1/policies lists it",
            )),
        };
    };
    if let Some(p) = policies {
        if resource == tollgate::Limiters::DEFAULT_POLICY_NAME {
            return Ok((tollgate::Limiters::DEFAULT_POLICY_NAME, p.limiter("")));
        }
        // A resource with a policy of its own is named by it; the set is
        // this configuration's, never replaced in place, so the name and
        // the limiter are of one set.
        if p.named_policy(resource).0 == resource {
            return Ok((resource, p.limiter(resource)));
        }
    }
    for (_, domain) in config.domains() {
        for rule in domain.rules() {
            if rule.rule().resource == resource {
                if let Some(limiter) = rule.limiter() {
                    return Ok((&rule.rule().resource, limiter.clone()));
                }
            }
        }
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no policy named {resource:?}: name a resource of the policy file, default, or an Envoy \
             limit's resource (GET /v1/policies lists them)"
        ),
    ))
}

/// `GET /v1/top`.
pub(crate) async fn handler(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    match run(&shared, query).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn run(
    shared: &Shared,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("the query is not readable: {e}")))?;
    let asked = asked(pairs)?;
    let config = shared.config.load();
    let (name, limiter) = limiter(&config, asked.resource.as_deref())?;
    let metric = match asked.by {
        By::Metric(metric) => metric,
        By::InFlight => return holders(shared, name, &limiter, asked.n),
    };
    let Some(list) = limiter.top_keys_with_remaining(metric, asked.n).await else {
        return Err(no_top_keys(name));
    };
    let keys = list
        .keys
        .iter()
        .map(|top| KeyBody {
            key: String::from_utf8_lossy(&top.key).into_owned(),
            denied: top.denied,
            admitted: top.admitted,
            shadow_denied: top.shadow_denied,
            remaining: top.remaining,
            error: top.error,
            cut: top.cut,
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &TopBody {
            resource: name,
            by: metric.name(),
            window_s: list.window.as_secs(),
            capacity: list.capacity,
            error_bound: list.error_bound,
            keys,
        },
    ))
}

/// The 409 of a policy whose top keys are off.
fn no_top_keys(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("the policy {name:?} keeps no top keys: the policy file turns them off (top_keys: false)"),
    )
}

/// `by=in_flight`: the keys of the concurrency policy `name` holding most.
fn holders(
    shared: &Shared,
    name: &str,
    limiter: &Arc<Limiter<AnyBackend>>,
    n: usize,
) -> Result<Response, ApiError> {
    crate::http::permits::concurrency(limiter, name, "by", "by=denied, admitted or shadow_denied")?;
    let Some((capacity, held)) = shared.holders.list(limiter, name, n) else {
        return Err(no_top_keys(name));
    };
    let keys = held
        .into_iter()
        .map(|h| HolderBody {
            key: String::from_utf8_lossy(&h.key).into_owned(),
            in_flight: h.in_flight,
            limit: h.limit,
            answered_ms_ago: u64::try_from(h.age.as_millis()).unwrap_or(u64::MAX),
            expires_ms: crate::http::decide::ceil_millis(h.expires_in),
            cut: h.cut,
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &HoldersBody {
            resource: name,
            by: IN_FLIGHT,
            capacity,
            keys,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parameters_take_defaults_and_each_mistake_names_its_parameter() {
        let a = asked(Vec::new()).unwrap();
        assert_eq!(
            (a.resource, a.by, a.n),
            (None, By::Metric(TopMetric::Denied), DEFAULT_N)
        );
        let a = asked(pairs(&[
            ("resource", "login"),
            ("by", "shadow_denied"),
            ("n", "1000"),
        ]))
        .unwrap();
        assert_eq!(
            (a.resource.as_deref(), a.by, a.n),
            (Some("login"), By::Metric(TopMetric::ShadowDenied), 1000)
        );
        assert_eq!(asked(pairs(&[("by", "in_flight")])).unwrap().by, By::InFlight);
        for (query, field) in [
            (&[("by", "most")][..], "by"),
            (&[("n", "0")][..], "n"),
            (&[("n", "1001")][..], "n"),
            (&[("n", "-1")][..], "n"),
            (&[("limit", "5")][..], "limit"),
            (&[("n", "5"), ("n", "6")][..], "n"),
        ] {
            let err = asked(pairs(query)).err().expect("refused");
            assert_eq!(err.field.as_deref(), Some(field), "{query:?}: {}", err.error);
            assert_eq!(err.status, StatusCode::BAD_REQUEST);
        }
    }
}
