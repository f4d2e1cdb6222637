//! The service's own metrics, recorded through the `metrics` facade next to
//! the library's, and the Prometheus recorder that exports them all.

use std::sync::OnceLock;
use std::time::Instant;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests answered, by `protocol`, `endpoint` and `status`.
pub const REQUESTS: &str = "tollgate_server_requests_total";
/// Time to answer a request, in seconds, by `protocol` and `endpoint`.
pub const DURATION: &str = "tollgate_server_request_duration_seconds";
/// Envoy descriptors in shadow mode that were over their limit and answered
/// OK, by `resource`.
pub const SHADOW_DENIED: &str = "tollgate_server_shadow_denied_total";
/// Charges of a denied Envoy request of several descriptors that stay in
/// place: the refund giving one back failed (the store failed in
/// between), or the charge was made by an in-memory fallback.
pub const PARTIAL_CHARGES: &str = "tollgate_server_envoy_partial_charges_total";
/// Configuration reloads, by `outcome` (`applied` or `rejected`).
pub const RELOADS: &str = "tollgate_server_reloads_total";

/// The latency buckets of [`DURATION`], in seconds.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The process's Prometheus recorder, installed on first use; `None` when
/// another recorder was installed first (that one then exports).
pub(crate) fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(DURATION.to_owned()), BUCKETS)
                .ok()?
                .install_recorder()
                .ok()?;
            register_rare();
            Some(handle)
        })
        .clone()
}

/// Registers the service's counters of rare events at zero, so that they
/// are exported from the start: a dashboard or an alert on them sees 0, not
/// "no data", until the first event.
fn register_rare() {
    for outcome in ["applied", "rejected"] {
        metrics::counter!(RELOADS, "outcome" => outcome).increment(0);
    }
    metrics::counter!(PARTIAL_CHARGES).increment(0);
}

/// Records one answered request.
pub(crate) fn request_done(protocol: &'static str, endpoint: String, status: u16, started: Instant) {
    metrics::counter!(REQUESTS, "protocol" => protocol, "endpoint" => endpoint.clone(), "status" => status.to_string())
        .increment(1);
    metrics::histogram!(DURATION, "protocol" => protocol, "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
}
