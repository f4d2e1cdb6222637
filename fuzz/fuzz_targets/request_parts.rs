//! What the middleware reads from a request: `Forwarded`, `X-Forwarded-For`
//! and `X-Real-IP` behind trusted proxies, an API-key header, the cost
//! header and the content type, in any bytes a client can send.
//!
//! Every request is answered, never a panic: by the service or 429 when a
//! key and a cost could be read, 400 when they could not (gRPC statuses
//! for a gRPC request), as the public pieces (`ClientIp`, `KeyExtractor`,
//! `parse_cost`) say on their own. A peer that is not a trusted proxy is
//! its own client, whatever the headers claim.

#![no_main]

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tollgate::clock::ManualClock;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::http::{self, HeaderName, HeaderValue, Request, Response};
use tollgate_http::{
    ClientIp, ForwardedHeader, HeaderMode, IpGrouping, KeyExtractor, PeerAddr, RateLimit, RequestInfo,
};
use tower::{service_fn, Layer, ServiceExt};

/// The headers a request may carry, chosen by index.
const NAMES: [&str; 8] = [
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
    "x-api-key",
    "x-cost",
    "content-type",
    "host",
    "te",
];

#[derive(Arbitrary, Debug)]
struct Input {
    /// Which forwarded header the trusted proxies use.
    forwarded: u8,
    /// The peer's address: IPv4 or IPv6, inside the trusted network or not.
    peer_v6: bool,
    peer_trusted: bool,
    peer_host: u16,
    /// The key: the client address, or the API key header.
    key_from_header: bool,
    cost_from_header: bool,
    mode: u8,
    headers: Vec<(u8, Vec<u8>)>,
    path: String,
}

fn peer(input: &Input) -> IpAddr {
    let [a, b] = input.peer_host.to_be_bytes();
    match (input.peer_v6, input.peer_trusted) {
        (false, true) => IpAddr::V4(Ipv4Addr::new(10, 0, a, b)),
        (false, false) => IpAddr::V4(Ipv4Addr::new(192, 0, a, b)),
        (true, true) => IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, input.peer_host)),
        (true, false) => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, input.peer_host)),
    }
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
}

fuzz_target!(|input: Input| {
    let header = [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded, ForwardedHeader::XRealIp]
        [usize::from(input.forwarded % 3)];
    let client_ip = ClientIp::new()
        .trust_all(["10.0.0.0/8", "fd00::/8"])
        .expect("valid networks")
        .header(header);
    let key = if input.key_from_header {
        KeyExtractor::header("x-api-key")
    } else {
        KeyExtractor::client_ip(client_ip.clone())
    };
    let mode = [HeaderMode::RateLimit, HeaderMode::IetfDraft, HeaderMode::Legacy, HeaderMode::Off]
        [usize::from(input.mode % 4)];

    let mut builder = Request::builder().method("GET");
    builder = builder.uri(http::Uri::try_from(input.path.as_str()).unwrap_or_else(|_| http::Uri::from_static("/")));
    let Ok(mut request) = builder.body(()) else {
        return;
    };
    let peer = peer(&input);
    request.extensions_mut().insert(PeerAddr(SocketAddr::new(peer, 4711)));
    for (name, value) in input.headers.iter().take(16) {
        // Values the `http` crate refuses never reach a service: hyper
        // refuses them first.
        if let Ok(value) = HeaderValue::from_bytes(value) {
            let name = HeaderName::from_static(NAMES[usize::from(*name) % NAMES.len()]);
            request.headers_mut().append(name, value);
        }
    }

    // What the public pieces say of this request, on their own.
    let (parts, ()) = request.into_parts();
    let info = RequestInfo::from_http(&parts);
    let grpc = info.is_grpc();
    if let Ok(ip) = client_ip.resolve(&info) {
        if !client_ip.is_trusted(peer) {
            assert_eq!(ip, peer.to_canonical(), "an untrusted peer's headers were believed");
        }
    } else {
        assert!(client_ip.is_trusted(peer), "an untrusted peer's headers were read");
    }
    if parts.headers.get(header.name()).is_none() {
        assert_eq!(client_ip.resolve(&info).ok(), Some(peer.to_canonical()));
    }
    let key_ok = key.extract(&info, &IpGrouping::default()).is_ok();
    let costs: Vec<&[u8]> = parts.headers.get_all("x-cost").iter().map(HeaderValue::as_bytes).collect();
    let cost_ok = !input.cost_from_header
        || match costs.as_slice() {
            [] => true,
            [one] => tollgate_http::parse_cost(one).is_ok(),
            _ => false,
        };

    // The middleware, deciding the same request.
    let policy = Policy::new(Strategy::TokenBucket, 3, Duration::from_secs(60)).expect("a policy");
    let limiter = Limiter::builder()
        .clock(ManualClock::new(Duration::from_secs(1_000_000)))
        .policy(policy)
        .build()
        .expect("a limiter");
    let mut rate_limit = RateLimit::new(limiter).key(key).headers(mode);
    if input.cost_from_header {
        rate_limit = rate_limit.cost_header("x-cost");
    }
    let inner = service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::builder().header("x-inner", "1").body(Full::<Bytes>::default()).expect("a response"))
    });
    let service = rate_limit.layer().layer(inner);
    let response = RUNTIME
        .with(|rt| rt.block_on(service.oneshot(Request::from_parts(parts, ()))))
        .expect("infallible");

    let served = response.headers().contains_key("x-inner");
    let grpc_status = response.headers().get("grpc-status").map(|v| v.to_str().expect("ascii").to_owned());
    match (key_ok && cost_ok, grpc) {
        (true, false) => assert!(
            served || response.status() == 429,
            "a request with a key and a cost answered {}",
            response.status()
        ),
        (true, true) => assert!(served || grpc_status.as_deref() == Some("8"), "{response:?}"),
        (false, false) => assert_eq!(response.status(), 400, "{response:?}"),
        (false, true) => assert_eq!(grpc_status.as_deref(), Some("3"), "{response:?}"),
    }
    if served {
        assert!(key_ok && cost_ok, "served without a key or a cost: {response:?}");
    }
});
