//! What reloading a large Envoy configuration costs: how long a reload of
//! the unchanged file takes, and what it does to the latency of decisions
//! being served meanwhile. (The memory a loaded descriptor takes is checked,
//! and printed, by the `envoy_memory` test.)
//!
//! ```text
//! cargo bench -p tollgate-server --bench envoy_reload
//! ```
//!
//! `DESCRIPTORS` descriptors (20,000 by default), each a limit of its own,
//! in one domain, in memory. Latency: 8 clients
//! send Envoy requests one after another on one descriptor for `SECONDS`
//! seconds (4) without reloads, then as long again while the file is
//! reloaded every 250 ms; the p50, p99 and maximum of each phase are
//! printed, with the reloads' durations.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_test_support::bench::env_number;

fn quantiles(mut latencies: Vec<Duration>) -> (Duration, Duration, Duration) {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    (at(0.5), at(0.99), *latencies.last().unwrap())
}

/// Requests from 8 clients for `seconds`: every latency.
async fn load(addr: std::net::SocketAddr, seconds: u64) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..8 {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let request = RateLimitRequest {
                    domain: "big".to_owned(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: format!("k{}", (c * 7 + i) % 100),
                            value: format!("v{i}"),
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                let started = Instant::now();
                client.should_rate_limit(request).await.unwrap();
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("envoy_reload: bench");
        return;
    }
    let descriptors = env_number("DESCRIPTORS", 20_000) as usize;
    let seconds = env_number("SECONDS", 4);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.yaml");
        tollgate_test_support::envoy_files::write_one_limit_per_descriptor(&file, "big", descriptors);
        let server = tollgate_server::Server::builder()
            .config(&file)
            .listen("127.0.0.1:0".parse().unwrap())
            .grpc_listen("127.0.0.1:0".parse().unwrap())
            .watch_files(false)
            .reload_on_sighup(false)
            .bind()
            .await
            .unwrap();
        let grpc = server.grpc_local_addr().unwrap();
        let reloader = server.reloader();
        tokio::spawn(server.run(std::future::pending()));
        let quiet = quantiles(load(grpc, seconds).await);
        let reloading = Arc::new(AtomicBool::new(true));
        let reloads = {
            let reloading = reloading.clone();
            tokio::spawn(async move {
                let mut took = Vec::new();
                while reloading.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    reloader.reload().await.unwrap();
                    took.push(started.elapsed());
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                took
            })
        };
        let during = quantiles(load(grpc, seconds).await);
        reloading.store(false, Ordering::Relaxed);
        let mut took = reloads.await.unwrap();
        took.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for (phase, (p50, p99, max)) in [("no reload", quiet), ("reloading", during)] {
            println!(
                "{phase:10} decision latency p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
                ms(p50),
                ms(p99),
                ms(max)
            );
        }
        println!(
            "{} reloads of the unchanged file: median {:.0} ms, longest {:.0} ms; the reload adds {:.1} ms to the longest decision",
            took.len(),
            ms(took[took.len() / 2]),
            ms(*took.last().unwrap()),
            (ms(during.2) - ms(quiet.2)).max(0.0)
        );
    });
}
