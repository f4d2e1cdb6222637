//! `POST /v1/decide`: one decision for a JSON request
//! `{"resource": "login", "key": "user-1", "cost": 1}`, or, with
//! `"max_delay_ms"`, one reservation: the request waits up to that long
//! for its turn instead of being refused; or, with `"charge": "always"`,
//! a report of usage known after the fact, charged whether admitted or
//! not. `"limit"` (and `"window_ms"`, or `"calendar"`) decide under a
//! limit the request names, with the resource's strategy
//! ([`tollgate::Overrides`]).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Serialize;
use serde_json::{Map, Value};
use tollgate::calendar::Calendar;
use tollgate::{Charge, Decision, Limiters, Policy};
use tollgate_config::{AnyBackend, PolicySet};

use crate::http::error::{json_response, ApiError};
use crate::http::request_calendars::{calendar_field, CalendarField, RequestCalendars};
use crate::permit_token::Kind;
use crate::shared::Shared;

/// The largest request body `/v1/decide` and the operation routes read:
/// 64 KiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A decision request, validated.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DecideRequest {
    pub(crate) resource: Option<String>,
    pub(crate) key: Vec<u8>,
    pub(crate) cost: u64,
    /// `max_delay_ms`: wait up to this long instead of being refused.
    pub(crate) max_delay: Option<Duration>,
    /// `charge`: what the request is charged, when it says (otherwise as
    /// its resource is configured).
    pub(crate) charge: Option<Charge>,
    /// `limit` and `window_ms` or `calendar`: the limit the request names
    /// in place of its resource's (and what it counts in, else what the
    /// resource's counts in).
    pub(crate) limit: Option<(u64, Option<Named>)>,
    /// `settle`: charge the cost as an estimate and answer a hold to
    /// settle with the usage (`POST /v1/settle`).
    pub(crate) settle: bool,
}

/// What a limit a request names counts in, as the request names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    /// `window_ms`.
    Window(Duration),
    /// `calendar`, not yet made.
    Calendar(CalendarField),
}

/// What a limit a request names counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Per {
    Window(Duration),
    Calendar(Calendar),
}

/// The request's limit with its calendar made (or found) among those
/// requests have named.
fn resolve(
    limit: Option<(u64, Option<Named>)>,
    calendars: &RequestCalendars,
) -> Result<Option<(u64, Option<Per>)>, ApiError> {
    Ok(match limit {
        None => None,
        Some((limit, None)) => Some((limit, None)),
        Some((limit, Some(Named::Window(window)))) => Some((limit, Some(Per::Window(window)))),
        Some((limit, Some(Named::Calendar(named)))) => {
            Some((limit, Some(Per::Calendar(calendars.calendar(&named)?))))
        }
    })
}

/// The largest `max_delay_ms`: one hour.
pub(crate) const MAX_DELAY_MS: u64 = 3_600_000;

/// A decision with the policy that made it.
pub(crate) struct Decided<'a> {
    /// The resource's name, or `default`.
    pub(crate) name: &'a str,
    /// The policy the decision was made under.
    pub(crate) policy: Policy,
    pub(crate) decision: Decision,
}

/// Decides `request` with the limiter the policy file gives its resource,
/// as every caller decides (or, under a `limit` the request names, that
/// limit's with the resource's strategy): charged as `charge` says, or as
/// the resource is configured.
pub(crate) async fn decide<'a>(
    config: &'a PolicySet,
    resource: Option<&'a str>,
    (key, cost): (&[u8], u64),
    (charge, limit): (Option<Charge>, Option<(u64, Option<Per>)>),
) -> Result<Decided<'a>, ApiError> {
    let policies = policies(config)?;
    let resource = resource.unwrap_or("");
    let limiter = limiter(config, resource, limit)?;
    rate_limit(policies, resource, &limiter)?;
    let decided = match charge {
        Some(Charge::Always) => limiter.charge(key, cost).await,
        Some(Charge::Admitted) if limiter.charges() == Charge::Always => {
            let (name, _) = policies.named_policy(resource);
            return Err(ApiError::field(
                "charge",
                format!(
                    "\"admitted\" asks that a denied request be charged nothing, but {name:?} charges \
                     every request (charge: always in the policy file); leave `charge` out"
                ),
            ));
        }
        Some(Charge::Admitted) | None => limiter.allow_n(key, cost).await,
    };
    let decision = decided.map_err(|err| ApiError::backend(&err))?;
    let (name, _) = policies.named_policy(resource);
    Ok(Decided {
        name,
        policy: *limiter.policy(),
        decision,
    })
}

/// Refuses a decision on a concurrency limit, which holds permits, or on
/// a resource that combines its rates with one (a decision would hold
/// nothing): a 400 naming `strategy` and the routes to use.
fn rate_limit(
    policies: &Limiters<AnyBackend>,
    resource: &str,
    limiter: &tollgate::Limiter<AnyBackend>,
) -> Result<(), ApiError> {
    let what = if limiter.policy().limits()[0].strategy().is_concurrency() {
        "is a concurrency limit (strategy concurrency)"
    } else if policies.in_flight(resource).is_some() {
        "combines its rates with a concurrency limit (strategy concurrency), which a decision \
         would not hold"
    } else {
        return Ok(());
    };
    let name = policies.named_policy(resource).0;
    Err(ApiError::field(
        "strategy",
        format!(
            "{name:?} {what}: it holds permits of requests in flight; acquire one with POST \
             /v1/acquire and give it back with POST /v1/release"
        ),
    ))
}

/// The limiter of `resource`: its own, or under a `limit` per window or
/// calendar period the request names (the resource's when `None`), with
/// the resource's strategy and settings.
fn limiter(
    config: &PolicySet,
    resource: &str,
    limit: Option<(u64, Option<Per>)>,
) -> Result<Arc<tollgate::Limiter<AnyBackend>>, ApiError> {
    let Some((limit, per)) = limit else {
        return Ok(policies(config)?.limiter(resource));
    };
    let overrides = match config.overrides(resource) {
        Some(Ok(overrides)) => overrides,
        Some(Err(err)) => {
            return Err(ApiError::field(
                "limit",
                format!("the resource's policy takes no limit per request: {err}"),
            ))
        }
        None => return Err(no_policy_file()),
    };
    let limiter = match per {
        None => overrides.limiter(limit, None),
        Some(Per::Window(window)) => overrides.limiter(limit, Some(window)),
        Some(Per::Calendar(calendar)) => overrides.calendar_limiter(limit, calendar),
    };
    limiter.map_err(|err| match err {
        tollgate::Error::Config(err) => {
            let field = match err.field() {
                "window" => "window_ms",
                "calendar" => "calendar",
                _ => "limit",
            };
            ApiError::field(field, err.reason().to_owned())
        }
        other => ApiError::backend(&other),
    })
}

/// The policy file's limiter; 404 without a policy file.
pub(crate) fn policies(config: &PolicySet) -> Result<&Limiters<AnyBackend>, ApiError> {
    config.policies().map(|p| &**p).ok_or_else(no_policy_file)
}

/// The answer of the HTTP API without a policy file: 404.
fn no_policy_file() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no tollgate policy file is loaded: the HTTP API uses a policy file's policies (give one \
         with --config); Envoy files serve the gRPC API",
    )
}

/// The JSON answer: the decision's figures in milliseconds (rounded up),
/// the policy that decided and the limit that bound it. Fields may be
/// added; clients should ignore those they do not know.
#[derive(Serialize)]
struct DecisionBody<'a> {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_ms: u64,
    retry_after_ms: Option<u64>,
    /// The resource whose policy decided, or `default`.
    policy: &'a str,
    /// The index of the binding limit in the policy's limits.
    bound_by: usize,
    /// The binding limit's strategy and window (for a calendar's periods,
    /// the longest one).
    strategy: &'static str,
    window_ms: u64,
    /// The binding limit's calendar, when it counts in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    calendar: Option<CalendarBody>,
    fail_open: bool,
    fallback: bool,
    /// The policy is in shadow mode and would have denied (`allowed` is
    /// then `true`).
    shadow_denied: bool,
    /// `exempt` or `deny` when the key's list decided; `null` otherwise.
    listed: Option<&'static str>,
    /// With `max_delay_ms`: how long to wait before proceeding (rounded
    /// up), when the request was admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    /// With `max_delay_ms`: the name of a reservation that waits, for
    /// `POST /v1/cancel` to give it back if the client will not proceed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation: Option<String>,
    /// With `"settle": true`: the hold to settle with `POST /v1/settle`
    /// (`null` when nothing was charged).
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<Option<String>>,
}

/// A calendar in an answer, as a request names one.
#[derive(Serialize)]
struct CalendarBody {
    period: &'static str,
    time_zone: &'static str,
    anchor: String,
}

pub(crate) use tollgate::__private::ceil_millis;

/// The JSON answer of decision `d` under `policy` of resource `name`.
fn body<'a>(name: &'a str, policy: &Policy, d: &Decision) -> DecisionBody<'a> {
    let limits = policy.limits();
    let bound = limits.get(d.bound_by).unwrap_or(&limits[0]);
    DecisionBody {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        reset_ms: ceil_millis(d.reset),
        retry_after_ms: d.retry_after.map(ceil_millis),
        policy: name,
        bound_by: d.bound_by,
        strategy: bound.strategy().name(),
        window_ms: ceil_millis(bound.window()),
        calendar: bound.calendar().map(|c| CalendarBody {
            period: c.period().name(),
            time_zone: c.time_zone(),
            anchor: c.anchor(),
        }),
        fail_open: d.fail_open,
        fallback: d.fallback,
        shadow_denied: d.shadow_denied,
        listed: d.listed.map(tollgate::Listed::name),
        delay_ms: None,
        reservation: None,
        hold: None,
    }
}

/// Holds `request`'s cost as an estimate on its resource's limiter: the
/// decision's answer, with the `hold` to settle (`null` when nothing was
/// charged: denied, an exempt key, shadow mode's or the fail policy's
/// admission).
async fn hold(shared: &Shared, config: &PolicySet, request: &DecideRequest) -> Result<Response, ApiError> {
    let policies = policies(config)?;
    let resource = request.resource.as_deref().unwrap_or("");
    let limiter = policies.limiter(resource);
    let (name, _) = policies.named_policy(resource);
    rate_limit(policies, resource, &limiter)?;
    let held = limiter
        .hold(&request.key, request.cost)
        .await
        .map_err(|err| ApiError::backend(&err))?;
    let token = held
        .id()
        .map(|id| shared.permit_key.issue(Kind::Hold, resource, &request.key, id.0));
    let mut answer = body(name, limiter.policy(), held.decision());
    answer.hold = Some(token);
    Ok(json_response(StatusCode::OK, &answer))
}

/// The handler.
pub(crate) async fn handler(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    match run(&shared, &headers, body).await {
        Ok(response) => response,
        Err(err) => axum::response::IntoResponse::into_response(err),
    }
}

async fn run(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(headers, body).await?;
    let request = parse(&bytes)?;
    if let Some((limit, _)) = &request.limit {
        let limit = *limit;
        if shared.max_limit_override == 0 {
            return Err(ApiError::field(
                "limit",
                "limits chosen per request are turned off here (tollgate serve --max-limit-override 0)",
            ));
        }
        if limit > shared.max_limit_override {
            return Err(ApiError::field(
                "limit",
                format!(
                    "{limit} is above {}, the largest limit a request may name here \
                     (tollgate serve --max-limit-override)",
                    shared.max_limit_override
                ),
            ));
        }
    }
    if request.settle {
        let config = shared.config.load();
        return hold(shared, &config, &request).await;
    }
    let limit = resolve(request.limit, &shared.request_calendars)?;
    let config = shared.config.load();
    let Some(max_delay) = request.max_delay else {
        let decided = decide(
            &config,
            request.resource.as_deref(),
            (&request.key, request.cost),
            (request.charge, limit),
        )
        .await?;
        let answer = self::body(decided.name, &decided.policy, &decided.decision);
        return Ok(json_response(StatusCode::OK, &answer));
    };
    let policies = policies(&config)?;
    let resource = request.resource.as_deref().unwrap_or("");
    let limiter = limiter(&config, resource, limit)?;
    rate_limit(policies, resource, &limiter)?;
    let reservation = limiter
        .reserve_n(&request.key, request.cost, max_delay)
        .await
        .map_err(|err| ApiError::backend(&err))?;
    let (name, _) = policies.named_policy(resource);
    let mut answer = self::body(name, limiter.policy(), reservation.decision());
    if reservation.is_reserved() {
        let delay = reservation.delay();
        answer.delay_ms = Some(ceil_millis(delay));
        if !delay.is_zero() {
            let proceeds = tokio::time::Instant::now() + delay;
            answer.reservation = shared
                .reservations
                .keep(request.resource.clone(), reservation, proceeds);
        }
    }
    Ok(json_response(StatusCode::OK, &answer))
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the body is larger than {MAX_BODY_BYTES} bytes, the most a request to the JSON API may have"
        ),
    )
}

/// How much of a body over [`MAX_BODY_BYTES`] is read and thrown away
/// before the 413 is sent: a client still writing its body when the answer
/// comes would otherwise meet a closed connection and never read the
/// answer. Larger bodies get the answer at once.
const DISCARD_BYTES: usize = 1024 * 1024;

/// The body, at most [`MAX_BODY_BYTES`] of it.
pub(crate) async fn read_body(headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        if declared.is_some_and(|n| n <= DISCARD_BYTES as u64) {
            let _ = Limited::new(body, DISCARD_BYTES).collect().await;
        }
        return Err(too_large());
    }
    let mut body = Limited::new(body, MAX_BODY_BYTES + DISCARD_BYTES);
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    if bytes.len() + data.len() <= MAX_BODY_BYTES {
                        bytes.extend_from_slice(&data);
                    } else {
                        // Over the cap: read on (up to the discard bound),
                        // keep nothing.
                        return discard_rest(body).await;
                    }
                }
            }
            Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
            Err(err) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("the body could not be read: {err}"),
                ))
            }
        }
    }
    Ok(bytes)
}

/// Reads what is left of a body over the cap, then answers 413.
async fn discard_rest(mut body: Limited<Body>) -> Result<Vec<u8>, ApiError> {
    while let Some(Ok(_)) = body.frame().await {}
    Err(too_large())
}

/// Parses and validates a request body.
pub(crate) fn parse(bytes: &[u8]) -> Result<DecideRequest, ApiError> {
    let fields = object(
        bytes,
        &[
            "resource",
            "key",
            "cost",
            "max_delay_ms",
            "charge",
            "limit",
            "window_ms",
            "calendar",
            "settle",
        ],
        r#"{"resource": "login", "key": "user-1", "cost": 1}"#,
    )?;
    let settle = settle_field(&fields)?;
    let charge = charge_field(&fields)?;
    if charge == Some(Charge::Always) && fields.get("max_delay_ms").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::field(
            "max_delay_ms",
            "is given with \"charge\": \"always\": a report charges usage already spent, it does not \
             wait for a turn; send one or the other",
        ));
    }
    let max_delay = whole_number(&fields, "max_delay_ms", "a delay", MAX_DELAY_MS, |ms| {
        if ms > MAX_DELAY_MS {
            Err(format!(
                "{ms} is above {MAX_DELAY_MS} (one hour), the longest a request may wait here"
            ))
        } else {
            Ok(ms)
        }
    })?;
    let limit = named_limit(&fields)?;
    Ok(DecideRequest {
        resource: resource(&fields)?,
        key: key(&fields)?,
        cost: cost(&fields)?,
        max_delay: max_delay.map(Duration::from_millis),
        charge,
        limit,
        settle,
    })
}

/// `settle`: `true` to hold the cost as an estimate. It stands alone: a
/// hold is charged now (no `max_delay_ms`), as the resource charges (no
/// `charge`), under the resource's own limit (no `limit`).
fn settle_field(fields: &Map<String, Value>) -> Result<bool, ApiError> {
    let settle = match fields.get("settle") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(false),
        Some(Value::Bool(true)) => true,
        Some(other) => {
            return Err(ApiError::field(
                "settle",
                format!("must be true or false, not {}", kind(other)),
            ))
        }
    };
    let beside = ["max_delay_ms", "charge", "limit"]
        .into_iter()
        .find(|name| fields.get(*name).is_some_and(|v| !v.is_null()));
    if let Some(name) = beside {
        return Err(ApiError::field(
            "settle",
            format!(
                "is given with {name:?}: a hold charges its estimate now, under the resource's own \
                 limit, and its usage is settled later; send one or the other"
            ),
        ));
    }
    Ok(settle)
}

/// `charge`: what the request is charged, `"admitted"` or `"always"`;
/// `None` when the body does not say.
fn charge_field(fields: &Map<String, Value>) -> Result<Option<Charge>, ApiError> {
    Ok(match fields.get("charge") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.parse::<Charge>().map_err(|_| {
            ApiError::field(
                "charge",
                format!(
                    "{s:?} is not \"admitted\" or \"always\": \"always\" charges the cost whether \
                     admitted or not, for usage reported after the fact"
                ),
            )
        })?),
        Some(other) => {
            return Err(ApiError::field(
                "charge",
                format!("must be \"admitted\" or \"always\", not {}", kind(other)),
            ))
        }
    })
}

/// `limit`, with `window_ms` or `calendar`: the limit the request names in
/// place of its resource's, and what it counts in (a window or a
/// calendar's periods, not both, and neither without the limit).
fn named_limit(fields: &Map<String, Value>) -> Result<Option<(u64, Option<Named>)>, ApiError> {
    let limit = whole_number(
        fields,
        "limit",
        "a limit",
        tollgate::Policy::MAX_LIMIT,
        check_cost,
    )?;
    let max_window = u64::try_from(tollgate::Policy::MAX_WINDOW.as_millis()).unwrap_or(u64::MAX);
    let window = whole_number(fields, "window_ms", "a window", max_window, |ms| match ms {
        0 => Err("must be at least 1 millisecond".to_owned()),
        ms if ms > max_window => Err(format!(
            "{ms} is above {max_window}, the longest window (100 years)"
        )),
        ms => Ok(ms),
    })?;
    let calendar = calendar_field(fields)?;
    let per = match (window, calendar) {
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "calendar",
                "is given with `window_ms`: a limit counts in a window or in a calendar's periods, \
                 not both",
            ))
        }
        (Some(ms), None) => Some(Named::Window(Duration::from_millis(ms))),
        (None, Some(calendar)) => Some(Named::Calendar(calendar)),
        (None, None) => None,
    };
    Ok(match (limit, per) {
        (Some(limit), per) => Some((limit, per)),
        (None, Some(Named::Window(_))) => {
            return Err(ApiError::field(
                "window_ms",
                "is given without `limit`: a window chosen per request comes with its limit",
            ))
        }
        (None, Some(Named::Calendar(_))) => {
            return Err(ApiError::field(
                "calendar",
                "is given without `limit`: a calendar chosen per request comes with its limit",
            ))
        }
        (None, None) => None,
    })
}

/// The body as a JSON object with only the fields `allowed` (listed in
/// errors, with `example` of a whole body).
pub(crate) fn object(bytes: &[u8], allowed: &[&str], example: &str) -> Result<Map<String, Value>, ApiError> {
    // Built only for an error message.
    let expected = || {
        allowed
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let body: JsonBody = serde_json::from_slice(bytes).map_err(|err| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {err}; send an object such as {example}"),
        )
    })?;
    let fields = match body {
        JsonBody::Object(fields) => fields,
        JsonBody::Duplicate(name) => {
            return Err(ApiError::field(
                &name,
                format!("the field {name:?} is given more than once; give each field once"),
            ))
        }
        JsonBody::Other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body must be a JSON object with the fields {}, such as {example}",
                    expected()
                ),
            ))
        }
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::field(
            unknown,
            format!("unknown field {unknown:?}: expected {}", expected()),
        ));
    }
    Ok(fields)
}

/// A request body as read: an object whose fields are each given once, an
/// object with a field given twice (the first such name), or another JSON
/// value. `serde_json::Value` keeps the last of duplicate fields, which
/// would let `{"key": "a", "key": "b"}` mean one thing here and another to
/// a proxy or log reader that keeps the first.
enum JsonBody {
    Object(Map<String, Value>),
    Duplicate(String),
    Other,
}

impl<'de> serde::Deserialize<'de> for JsonBody {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> serde::de::Visitor<'de> for BodyVisitor {
    type Value = JsonBody;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsonBody, A::Error> {
        let mut fields = Map::new();
        let mut duplicate = None;
        while let Some(name) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            if fields.contains_key(&name) {
                duplicate.get_or_insert(name);
            } else {
                fields.insert(name, value);
            }
        }
        Ok(duplicate.map_or(JsonBody::Object(fields), JsonBody::Duplicate))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsonBody, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(JsonBody::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<JsonBody, E> {
        Ok(JsonBody::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<JsonBody, E> {
        Ok(JsonBody::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<JsonBody, E> {
        Ok(JsonBody::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<JsonBody, E> {
        Ok(JsonBody::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<JsonBody, E> {
        Ok(JsonBody::Other)
    }

    fn visit_unit<E>(self) -> Result<JsonBody, E> {
        Ok(JsonBody::Other)
    }
}

/// The optional `resource` field: `None` picks the default policy.
pub(crate) fn resource(fields: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match fields.get("resource") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::field(
            "resource",
            format!("must be a string (a resource name), not {}", kind(other)),
        )),
    }
}

/// The required, non-empty `key` field.
pub(crate) fn key(fields: &Map<String, Value>) -> Result<Vec<u8>, ApiError> {
    match fields.get("key") {
        None | Some(Value::Null) => Err(ApiError::field(
            "key",
            "is required: whom the limit applies to, such as a user id",
        )),
        Some(Value::String(s)) if s.is_empty() => Err(ApiError::field("key", "must not be empty")),
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(other) => Err(ApiError::field(
            "key",
            format!("must be a string, not {}", kind(other)),
        )),
    }
}

/// The `cost` field: a whole number from 0 to [`tollgate::Policy::MAX_LIMIT`],
/// 1 when absent.
pub(crate) fn cost(fields: &Map<String, Value>) -> Result<u64, ApiError> {
    Ok(whole_number(fields, "cost", "a cost", tollgate::Policy::MAX_LIMIT, check_cost)?.unwrap_or(1))
}

/// The field `name`, when present: a whole number from 0 to `max`
/// (`what` names it in errors; `check` refuses a number above `max`).
pub(crate) fn whole_number(
    fields: &Map<String, Value>,
    name: &str,
    what: &str,
    max: u64,
    check: impl Fn(u64) -> Result<u64, String>,
) -> Result<Option<u64>, ApiError> {
    let number = match fields.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n,
        Some(other) => {
            return Err(ApiError::field(
                name,
                format!("must be a whole number, not {}", kind(other)),
            ))
        }
    };
    match number.as_u64() {
        Some(n) => check(n).map(Some).map_err(|e| ApiError::field(name, e)),
        None if number.as_i64().is_some() => Err(ApiError::field(
            name,
            format!("{number} is negative; {what} is a whole number from 0 to {max}"),
        )),
        // Numbers beyond 64 bits (and exponent forms) arrive as floating
        // point: say what is wrong with them rather than print their
        // rounded value.
        #[allow(clippy::cast_precision_loss)]
        None if number.as_f64().is_some_and(|f| f > max as f64) => Err(ApiError::field(
            name,
            format!("the number is above {max}, the most {what} can be"),
        )),
        None if number.as_f64().is_some_and(|f| f <= -9_223_372_036_854_775_808.0) => Err(ApiError::field(
            name,
            format!("the number is negative; {what} is a whole number from 0 to {max}"),
        )),
        None => Err(ApiError::field(
            name,
            format!("{number} is not a whole number from 0 to {max}"),
        )),
    }
}

/// A cost within what a limit can hold.
pub(crate) fn check_cost(n: u64) -> Result<u64, String> {
    if n > tollgate::Policy::MAX_LIMIT {
        return Err(format!(
            "{n} exceeds {}, the largest limit (2^62), so it could never be admitted",
            tollgate::Policy::MAX_LIMIT
        ));
    }
    Ok(n)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(body: &str) -> (Option<String>, String) {
        let err = parse(body.as_bytes()).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST, "{body}");
        (err.field, err.error)
    }

    #[test]
    fn a_request_takes_defaults_for_resource_and_cost() {
        assert_eq!(
            parse(br#"{"key": "user-1"}"#).unwrap(),
            DecideRequest {
                resource: None,
                key: b"user-1".to_vec(),
                cost: 1,
                max_delay: None,
                charge: None,
                limit: None,
                settle: false,
            }
        );
        assert_eq!(
            parse(br#"{"resource": "login", "key": "k", "cost": 0}"#).unwrap(),
            DecideRequest {
                resource: Some("login".to_owned()),
                key: b"k".to_vec(),
                cost: 0,
                max_delay: None,
                charge: None,
                limit: None,
                settle: false,
            }
        );
    }

    #[test]
    fn each_mistake_names_its_field() {
        let key = Some("key".to_owned());
        assert_eq!(error(r#"{"cost": 1}"#).0, key);
        assert_eq!(error(r#"{"key": ""}"#).0, key);
        assert_eq!(error(r#"{"key": 7}"#).0, key);
        assert_eq!(
            error(r#"{"key": "k", "resource": 1}"#).0.as_deref(),
            Some("resource")
        );
        for cost in [
            "-1",
            "1.5",
            "\"1\"",
            "true",
            "4611686018427387905",
            "18446744073709551616",
        ] {
            let (field, message) = error(&format!(r#"{{"key": "k", "cost": {cost}}}"#));
            assert_eq!(field.as_deref(), Some("cost"), "{cost}: {message}");
        }
        assert!(parse(br#"{"key": "k", "cost": 4611686018427387904}"#).is_ok());
        let (field, message) = error(r#"{"key": "k", "cots": 1}"#);
        assert_eq!(field.as_deref(), Some("cots"));
        assert!(message.contains("\"cots\""), "{message}");
        assert_eq!(error("[1]").0, None);
        assert_eq!(error("\"k\"").0, None);
        for (body, field) in [
            (r#"{"key": "a", "key": "b"}"#, "key"),
            (r#"{"key": "k", "cost": 0, "cost": 3}"#, "cost"),
            (r#"{"resource": "a", "key": "k", "resource": "a"}"#, "resource"),
        ] {
            let (named, message) = error(body);
            assert_eq!(named.as_deref(), Some(field), "{body}: {message}");
            assert!(message.contains("more than once"), "{body}: {message}");
        }
        for big in ["18446744073709551616", "1e30"] {
            let (_, message) = error(&format!(r#"{{"key": "k", "cost": {big}}}"#));
            assert!(message.contains("above 4611686018427387904"), "{big}: {message}");
            assert!(!message.contains("e+"), "{big}: {message}");
        }
        assert!(error("{").1.starts_with("the body is not JSON"));
    }

    #[test]
    fn charge_is_admitted_or_always_and_never_waits() {
        let request = parse(br#"{"key": "k", "cost": 900, "charge": "always"}"#).unwrap();
        assert_eq!((request.cost, request.charge), (900, Some(Charge::Always)));
        let request = parse(br#"{"key": "k", "charge": "admitted"}"#).unwrap();
        assert_eq!(request.charge, Some(Charge::Admitted));
        for (body, message) in [
            (
                r#"{"key": "k", "charge": "sometimes"}"#,
                "\"sometimes\" is not \"admitted\" or \"always\"",
            ),
            (r#"{"key": "k", "charge": true}"#, "not a boolean"),
            (
                r#"{"key": "k", "charge": "always", "max_delay_ms": 10}"#,
                "does not wait",
            ),
        ] {
            let (field, error) = error(body);
            assert!(error.contains(message), "{body}: {error}");
            assert!(
                matches!(field.as_deref(), Some("charge" | "max_delay_ms")),
                "{body}"
            );
        }
    }
}
