//! The service's own metrics, recorded through the `metrics` facade next to
//! the library's, and the Prometheus recorder that exports them all.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics::SharedString;
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
/// Writes of the `--state-file`, by `outcome` (`saved` or `failed`).
pub const STATE_SAVES: &str = "tollgate_server_state_saves_total";
/// Units held now by the permits this replica acquired (`POST
/// /v1/acquire`) and has not seen end, by `resource` (the concurrency
/// policy's name): a permit counts until a release through this replica
/// frees it, its expiry as the store last answered it here passes, or a
/// release or extend through this replica finds it gone. Not the fleet's
/// total: permits acquired through other replicas are theirs, and one
/// released through another replica counts here until its expiry.
pub const IN_FLIGHT: &str = "tollgate_server_in_flight_units";

/// The latency buckets of [`DURATION`], in seconds.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// How often the recorder's histograms are drained into their buckets.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The process's Prometheus recorder, installed on first use with a thread
/// of its own that runs its upkeep; `None` when another recorder was
/// installed first (that one then exports).
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
            spawn_upkeep(handle.clone());
            Some(handle)
        })
        .clone()
}

/// Drains the recorder's histograms every [`UPKEEP_INTERVAL`], on a thread
/// of its own. The recorder keeps every histogram sample until it is
/// drained: without upkeep, a service nobody scrapes grows by each
/// request's sample, and the first scrape drains them all at once on a
/// runtime worker. Draining a second's samples off the runtime keeps both
/// the memory and that work small.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-metrics-upkeep".to_owned())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_INTERVAL);
            handle.run_upkeep();
        });
    if let Err(err) = spawned {
        tracing::warn!(
            "cannot start the metrics upkeep thread ({err}); histograms are drained only when scraped"
        );
    }
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
pub(crate) fn request_done(
    protocol: &'static str,
    endpoint: impl Into<SharedString>,
    status: u16,
    started: Instant,
) {
    let endpoint = endpoint.into();
    metrics::counter!(REQUESTS, "protocol" => protocol, "endpoint" => endpoint.clone(), "status" => status_label(status))
        .increment(1);
    metrics::histogram!(DURATION, "protocol" => protocol, "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
}

/// The `status` label of a request's answer: an HTTP status, or a gRPC
/// code (0 for OK). The ones the service answers are written out, so that
/// labelling a request allocates nothing.
fn status_label(status: u16) -> SharedString {
    let known = match status {
        0 => "0",
        3 => "3",
        8 => "8",
        13 => "13",
        14 => "14",
        200 => "200",
        204 => "204",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        409 => "409",
        413 => "413",
        415 => "415",
        421 => "421",
        429 => "429",
        500 => "500",
        503 => "503",
        _ => return SharedString::from(status.to_string()),
    };
    SharedString::const_str(known)
}
