//! Envoy's `ShouldRateLimit`: a protobuf `RateLimitRequest`, framed as
//! gRPC and answered by the service in-process (tonic's decoding, the
//! descriptor matching, the decision), in sequences with time passing.
//!
//! A message is arbitrary bytes or one built from the fields Envoy sends,
//! with keys and values the configuration knows. Every message is
//! answered, never a panic: one that decodes gets `OK` or
//! `INVALID_ARGUMENT`, never another status; an `OK` answer holds one
//! status per descriptor, and the overall code is `OVER_LIMIT` exactly
//! when a descriptor's is.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use axum::body::Body;
use axum::http::Request;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const DOMAINS: [&str; 3] = ["edge", "", "other"];
const KEYS: [&str; 8] = ["remote_address", "user", "path", "internal", "plan", "tier", "generic_key", ""];
const VALUES: [&str; 8] = ["50.0.0.5", "/shadow", "monthly", "gold", "special", "alice", "10.0.0.1", ""];

#[derive(Arbitrary, Debug)]
enum Text {
    Known(u8),
    Any(String),
}

impl Text {
    fn pick(&self, known: &[&str]) -> String {
        match self {
            Text::Known(i) => known[usize::from(*i) % known.len()].to_owned(),
            Text::Any(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Descriptor {
    entries: Vec<(Text, Text)>,
    limit: Option<(u32, i32)>,
    hits_addend: Option<u64>,
    is_negative_hits: bool,
}

#[derive(Arbitrary, Debug)]
enum Message {
    Raw(Vec<u8>),
    Built {
        domain: Text,
        descriptors: Vec<Descriptor>,
        hits_addend: u32,
    },
}

impl Message {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Message::Raw(bytes) => bytes.clone(),
            Message::Built {
                domain,
                descriptors,
                hits_addend,
            } => RateLimitRequest {
                domain: domain.pick(&DOMAINS),
                descriptors: descriptors
                    .iter()
                    .take(8)
                    .map(|d| RateLimitDescriptor {
                        entries: d
                            .entries
                            .iter()
                            .take(4)
                            .map(|(k, v)| Entry {
                                key: k.pick(&KEYS),
                                value: v.pick(&VALUES),
                            })
                            .collect(),
                        limit: d.limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                            requests_per_unit,
                            unit: unit % 9,
                        }),
                        hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                        is_negative_hits: d.is_negative_hits,
                    })
                    .collect(),
                hits_addend: *hits_addend,
            }
            .encode_to_vec(),
        }
    }
}

fn grpc_status(answer: &tollgate_server::__in_process::Answer) -> Option<String> {
    let in_head = answer.head.headers.get("grpc-status");
    let in_trailers = answer.trailers.as_ref().and_then(|t| t.get("grpc-status"));
    in_head.or(in_trailers).map(|v| v.to_str().expect("ascii").to_owned())
}

fuzz_target!(|calls: Vec<(u16, Message)>| {
    let service = tollgate_fuzz::service();
    for (advance_ms, message) in calls.iter().take(8) {
        service.clock.advance(Duration::from_millis(u64::from(*advance_ms)));
        let bytes = message.bytes();
        let mut frame = Vec::with_capacity(5 + bytes.len());
        frame.push(0);
        frame.extend_from_slice(&u32::try_from(bytes.len()).expect("small").to_be_bytes());
        frame.extend_from_slice(&bytes);
        let request = Request::post(PATH)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Body::from(frame))
            .expect("a request");
        let answer = service.runtime.block_on(service.routes.grpc(request));
        let status = grpc_status(&answer).unwrap_or_else(|| panic!("no gRPC status: {answer:?}"));
        let Ok(sent) = RateLimitRequest::decode(bytes.as_slice()) else {
            continue;
        };
        match status.as_str() {
            "3" => {
                let message = answer.head.headers.get("grpc-message").or_else(|| {
                    answer.trailers.as_ref().and_then(|t| t.get("grpc-message"))
                });
                assert!(message.is_some_and(|m| !m.is_empty()), "INVALID_ARGUMENT without a message");
            }
            "0" => {
                let body = &answer.body;
                assert!(body.len() >= 5 && body[0] == 0, "not one uncompressed message: {answer:?}");
                let length = u32::from_be_bytes(body[1..5].try_into().expect("4 bytes")) as usize;
                assert_eq!(body.len(), 5 + length, "{answer:?}");
                let response = RateLimitResponse::decode(&body[5..]).expect("a response that decodes");
                assert_eq!(response.statuses.len(), sent.descriptors.len(), "{sent:?} → {response:?}");
                let over = Code::OverLimit as i32;
                let ok = Code::Ok as i32;
                assert!(response.statuses.iter().all(|s| s.code == ok || s.code == over), "{response:?}");
                assert_eq!(
                    response.overall_code == over,
                    response.statuses.iter().any(|s| s.code == over),
                    "{sent:?} → {response:?}"
                );
                assert!(response.overall_code == ok || response.overall_code == over);
            }
            other => panic!("a message that decodes was answered gRPC status {other}: {sent:?} → {answer:?}"),
        }
    }
});
