//! The JSON bodies of `POST /v1/decide`, `/v1/cancel` and the per-key
//! operations (`/v1/reset`, `/v1/block`, `/v1/refund`, `/v1/penalty`),
//! answered by the service in-process, every guard and handler included,
//! in sequences with time passing between calls.
//!
//! A body is either arbitrary bytes or an object built of the fields the
//! routes know (and others) holding values of every JSON kind. Every body
//! is answered, never a panic: a body that is not JSON is a 400; no body
//! gets a 5xx (the state is in memory: nothing can fail); an error names
//! what was wrong in `{"error": ...}`; a decision says `allowed`, `limit`
//! and `remaining`.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Number, Value};

const ROUTES: [&str; 6] = ["/v1/decide", "/v1/cancel", "/v1/reset", "/v1/block", "/v1/refund", "/v1/penalty"];

/// Field names: the routes' own, and one no route knows.
const FIELDS: [&str; 13] = [
    "resource",
    "key",
    "cost",
    "max_delay_ms",
    "charge",
    "limit",
    "window_ms",
    "calendar",
    "duration_ms",
    "units",
    "reservation",
    "id",
    "unknown",
];

/// Strings that mean something to the service.
const WORDS: [&str; 14] = [
    "login", "search", "export", "tokens", "leaky", "monthly", "api", "", "always", "admitted", "192.0.2.66",
    "10.1.2.3", "198.51.100.7", "user-1",
];

#[derive(Arbitrary, Debug)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Word(u8),
    Text(String),
    List(Vec<u8>),
    /// A calendar object: a period, a zone and an anchor, known or not.
    Calendar {
        period: u8,
        zone: u8,
        anchor: Option<String>,
    },
}

const PERIODS: [&str; 6] = ["day", "week", "month", "quarter", "year", "fortnight"];
const ZONES: [&str; 5] = ["UTC", "Europe/Berlin", "Pacific/Apia", "Australia/Lord_Howe", "Mars/Olympus"];

impl Json {
    fn value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(n) => Value::from(*n),
            Json::Uint(n) => Value::from(*n),
            Json::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::Word(i) => Value::from(WORDS[usize::from(*i) % WORDS.len()]),
            Json::Text(s) => Value::from(s.as_str()),
            Json::List(items) => Value::from(items.clone()),
            Json::Calendar { period, zone, anchor } => {
                let mut object = Map::new();
                object.insert("period".into(), PERIODS[usize::from(*period) % PERIODS.len()].into());
                object.insert("time_zone".into(), ZONES[usize::from(*zone) % ZONES.len()].into());
                if let Some(anchor) = anchor {
                    object.insert("anchor".into(), anchor.as_str().into());
                }
                Value::Object(object)
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Payload {
    Raw(Vec<u8>),
    Fields(Vec<(u8, Json)>),
}

#[derive(Arbitrary, Debug)]
struct Call {
    route: u8,
    advance_ms: u16,
    payload: Payload,
}

fuzz_target!(|calls: Vec<Call>| {
    let service = tollgate_fuzz::service();
    for call in calls.iter().take(16) {
        service.clock.advance(Duration::from_millis(u64::from(call.advance_ms)));
        let route = ROUTES[usize::from(call.route) % ROUTES.len()];
        let body = match &call.payload {
            Payload::Raw(bytes) => bytes.clone(),
            Payload::Fields(fields) => {
                let object: Map<String, Value> = fields
                    .iter()
                    .map(|(name, value)| (FIELDS[usize::from(*name) % FIELDS.len()].to_owned(), value.value()))
                    .collect();
                serde_json::to_vec(&object).expect("JSON")
            }
        };
        let is_json = serde_json::from_slice::<Value>(&body).is_ok();
        let request = Request::post(route)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("a request");
        let answer = service.runtime.block_on(service.routes.http(request));
        let status = answer.head.status;
        assert!(!status.is_server_error(), "{route} answered {status}: {answer:?}");
        if !is_json {
            assert_eq!(status, 400, "{route} took a body that is not JSON: {answer:?}");
        }
        if status == 204 {
            assert!(answer.body.is_empty(), "{route}: 204 with a body: {answer:?}");
            continue;
        }
        let reply: Value = serde_json::from_slice(&answer.body)
            .unwrap_or_else(|err| panic!("{route} answered {status} with a body that is not JSON ({err}): {answer:?}"));
        if status.is_success() {
            if route == "/v1/decide" {
                assert!(reply["allowed"].is_boolean(), "{reply}");
                assert!(reply["limit"].is_u64() && reply["remaining"].is_u64(), "{reply}");
            }
        } else {
            let error = reply["error"].as_str().unwrap_or_else(|| panic!("an error without a message: {reply}"));
            assert!(!error.is_empty());
        }
    }
});
