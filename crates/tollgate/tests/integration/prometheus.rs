//! The Prometheus exporter serves tollgate's counters over real HTTP, and
//! they match the decisions made.
//!
//! The exporter installs the process-wide recorder, so only one test here
//! may install it, and limiters that other tests of this binary build
//! afterwards report to it too. The test therefore reads only the series of
//! resource names no other test uses.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::clock::ManualClock;
use tollgate::{Limiters, Policy, Strategy};

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("local address")
}

fn scrape(addr: SocketAddr) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(mut stream) => {
                stream
                    .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .expect("sending the request");
                let mut response = String::new();
                stream
                    .read_to_string(&mut response)
                    .expect("reading the response");
                assert!(response.starts_with("HTTP/1.1 200"), "{response}");
                return response;
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "exporter never listened on {addr}: {e}"
                );
                std::thread::yield_now();
            }
        }
    }
}

/// The value of the sample line `name{labels}` (labels in exporter order).
fn sample(body: &str, name: &str, resource: &str, strategy: &str) -> u64 {
    let wanted = format!("{name}{{resource=\"{resource}\",strategy=\"{strategy}\"}} ");
    body.lines()
        .find_map(|line| line.strip_prefix(&wanted))
        .map_or(0, |v| v.trim().parse().expect("a counter value"))
}

#[test]
fn scraped_counters_match_the_decisions() {
    let addr = free_port();
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .expect("installing the exporter");
    let limiter = Limiters::builder()
        .clock(ManualClock::new(Duration::from_secs(1_000)))
        .default_policy(Policy::new(Strategy::SlidingWindow, 1, Duration::from_secs(60)).unwrap())
        .resource(
            "scraped-login",
            Policy::new(Strategy::FixedWindow, 2, Duration::from_secs(60)).unwrap(),
        )
        .resource(
            "scraped-search",
            Policy::new(Strategy::TokenBucket, 4, Duration::from_secs(60)).unwrap(),
        )
        .build()
        .unwrap();
    let mut expected = [[0u64; 2]; 2];
    for i in 0..30 {
        for (r, resource) in ["scraped-login", "scraped-search"].into_iter().enumerate() {
            let allowed = limiter
                .limiter(resource)
                .check(format!("client-{}", i % 5))
                .allowed;
            expected[r][usize::from(!allowed)] += 1;
        }
    }
    let body = scrape(addr);
    assert!(body.contains("# TYPE tollgate_allowed_total counter"), "{body}");
    for (r, (resource, strategy)) in [
        ("scraped-login", "fixed_window"),
        ("scraped-search", "token_bucket"),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(
            sample(&body, "tollgate_allowed_total", resource, strategy),
            expected[r][0],
            "{body}"
        );
        assert_eq!(
            sample(&body, "tollgate_denied_total", resource, strategy),
            expected[r][1],
            "{body}"
        );
    }
    assert_eq!(expected, [[10, 20], [20, 10]]);
    assert!(!body.contains("client-"), "keys must never become labels");
}
