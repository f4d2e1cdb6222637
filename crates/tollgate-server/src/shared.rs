//! What every request handler shares: the current configuration and the
//! service's settings.

use axum::http::StatusCode;
use metrics_exporter_prometheus::PrometheusHandle;
use tollgate_config::PolicySetHandle;

/// The state behind every listener.
pub(crate) struct Shared {
    /// The configuration, swapped whole by a reload.
    pub(crate) config: PolicySetHandle,
    /// The status of a denial on `/v1/auth`.
    pub(crate) auth_deny_status: StatusCode,
    /// The largest limit a request may name (`/v1/decide`'s `"limit"`).
    pub(crate) max_limit_override: u64,
    /// The rate-limit headers of the gRPC answers.
    pub(crate) envoy_headers: tollgate_http::HeaderMode,
    /// Who may call the admin routes.
    pub(crate) admin: AdminAccess,
    /// The Prometheus recorder, when this process's is ours.
    pub(crate) metrics: Option<PrometheusHandle>,
    /// The key the permits of `/v1/acquire` are signed with.
    pub(crate) permit_key: crate::permit_token::PermitKey,
    /// Reservations `/v1/cancel` can still give back.
    pub(crate) reservations: crate::pending::Reservations,
    /// The calendars `/v1/decide` requests have named.
    pub(crate) request_calendars: crate::http::request_calendars::RequestCalendars,
    /// The units held by the permits this replica acquired, per resource.
    pub(crate) in_flight: crate::in_flight::InFlight,
    /// The keys holding the most units in flight, per concurrency policy.
    pub(crate) holders: crate::holders::Holders,
    /// Set once the service was told to stop: `/readyz` answers 503 from
    /// then on, while it serves out its drain delay and drains.
    pub(crate) draining: std::sync::atomic::AtomicBool,
}

/// Who may call the admin routes.
pub(crate) enum AdminAccess {
    /// Anyone who can connect: the listener is on a loopback address.
    Loopback,
    /// Requests with this bearer token.
    Token(Vec<u8>),
    /// Nobody: the admin routes are turned off
    /// ([`ServerBuilder::no_admin`](crate::ServerBuilder::no_admin)).
    Off,
}
