//! Exposing tollgate's metrics in Prometheus format.
//!
//! `cargo run -p tollgate --example prometheus_metrics`, then
//! `curl http://127.0.0.1:9000/metrics` (or set `TOLLGATE_METRICS_ADDR`).
//!
//! Install the recorder before building limiters: limiters register their
//! metric handles when they are built.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::{Limiters, Policy, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::var("TOLLGATE_METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9000".to_owned())
        .parse()?;
    PrometheusBuilder::new().with_http_listener(addr).install()?;

    let limiter = Limiters::builder()
        .default_policy(Policy::new(
            Strategy::SlidingWindow,
            100,
            Duration::from_secs(60),
        )?)
        .resource(
            "login",
            Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60))?,
        )
        .build()?;

    println!("serving metrics on http://{addr}/metrics; deciding a request every 100ms (Ctrl-C to stop)");
    for i in 0u64.. {
        let resource = if i % 3 == 0 { "login" } else { "search" };
        let decision = limiter.limiter(resource).check(format!("client-{}", i % 4));
        if i % 10 == 0 {
            println!(
                "{resource}: allowed={} remaining={}",
                decision.allowed, decision.remaining
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
