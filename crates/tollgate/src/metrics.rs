//! Decision metrics through the `metrics` facade.
//!
//! Every limiter registers its handles once, when it is built, labelled by
//! `resource` (empty for a default policy, shown as `default`) and
//! `strategy` — never by key, whose cardinality clients control. A limiter
//! built to take over from another ([`crate::LimiterBuilder::build_from`]),
//! or told to share another's ([`crate::LimiterBuilder::share_metrics`]),
//! counts on that one's handles when their labels are the same. Install the
//! recorder (Prometheus, StatsD, OpenTelemetry, …) before building limiters;
//! without one, every handle is a no-op and a decision pays one untaken
//! branch per counter.
//!
//! | metric | kind | meaning |
//! | --- | --- | --- |
//! | `tollgate_allowed_total` | counter | requests admitted by a decision |
//! | `tollgate_denied_total` | counter | requests denied by a decision |
//! | `tollgate_backend_errors_total` | counter | decisions the backend failed to make |
//! | `tollgate_fail_open_total` | counter | requests admitted because the backend failed under fail-open |
//! | `tollgate_deny_cache_hits_total` | counter | requests denied from the local [deny cache](crate::protection::DenyCache), without a round trip |
//! | `tollgate_fallback_total` | counter | requests decided by the in-memory fallback because the store failed or its circuit breaker was open |
//! | `tollgate_circuit_open_total` | counter | requests not sent to the store because its [circuit breaker](crate::protection::CircuitBreaker) was open |
//! | `tollgate_shadow_denied_total` | counter | requests a policy in shadow mode allowed that enforcement would have denied |
//! | `tollgate_delayed_total` | counter | requests reserved to proceed after a delay ([`Limiter::reserve_n`](crate::Limiter::reserve_n), `acquire`, the middleware's `delay`) instead of being refused |
//! | `tollgate_lease_decisions_total` | counter | requests admitted from a [lease](crate::protection::Lease), without a round trip |
//! | `tollgate_lease_returned_units_total` | counter | unspent units of ended leases given back to the store |
//! | `tollgate_decision_seconds` | histogram | time to decide, sampled: one decision in [`LATENCY_SAMPLE`] per thread |
//!
//! Latency is sampled because timing an in-memory decision costs about as
//! much as the decision; one sample in [`LATENCY_SAMPLE`] per thread, timed
//! with the counter-based [`crate::clock::SystemClock`], keeps the histogram's shape
//! at a small fraction of that cost.

use std::cell::Cell;
use std::sync::{Arc, Once};

use metrics::{counter, describe_counter, describe_histogram, histogram, Counter, Histogram, Unit};

use crate::clock::{Clock, SystemClock};
use crate::policy::Policy;

/// One decision in this many (per thread) is timed for the latency histogram.
pub const LATENCY_SAMPLE: u32 = 64;

/// The handles of one limiter.
pub(crate) struct LimiterMetrics {
    /// The `resource` and `strategy` labels of every handle.
    labels: [(&'static str, String); 2],
    allowed: Counter,
    denied: Counter,
    backend_errors: Counter,
    fail_open: Counter,
    deny_cache_hits: Counter,
    fallback: Counter,
    circuit_open: Counter,
    shadow_denied: Counter,
    latency: Histogram,
}

impl std::fmt::Debug for LimiterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterMetrics")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

thread_local! {
    static SAMPLE: Cell<u32> = const { Cell::new(0) };
}

fn describe() {
    static DESCRIBED: Once = Once::new();
    DESCRIBED.call_once(|| {
        describe_counter!(
            "tollgate_allowed_total",
            Unit::Count,
            "Requests admitted by a rate-limit decision"
        );
        describe_counter!(
            "tollgate_denied_total",
            Unit::Count,
            "Requests denied by a rate-limit decision"
        );
        describe_counter!(
            "tollgate_backend_errors_total",
            Unit::Count,
            "Rate-limit decisions the backend failed to make"
        );
        describe_counter!(
            "tollgate_fail_open_total",
            Unit::Count,
            "Requests admitted because the backend failed under fail-open"
        );
        describe_counter!(
            "tollgate_deny_cache_hits_total",
            Unit::Count,
            "Requests denied from the local deny cache without asking the store"
        );
        describe_counter!(
            "tollgate_fallback_total",
            Unit::Count,
            "Requests decided by the in-memory fallback because the store failed"
        );
        describe_counter!(
            "tollgate_circuit_open_total",
            Unit::Count,
            "Requests not sent to the store because its circuit breaker was open"
        );
        describe_counter!(
            "tollgate_shadow_denied_total",
            Unit::Count,
            "Requests a policy in shadow mode allowed that enforcement would have denied"
        );
        describe_counter!(
            "tollgate_lease_decisions_total",
            Unit::Count,
            "Requests admitted from a lease, without a round trip to the store"
        );
        describe_counter!(
            "tollgate_lease_returned_units_total",
            Unit::Count,
            "Unspent units of ended leases given back to the store"
        );
        describe_counter!(
            "tollgate_delayed_total",
            Unit::Count,
            "Requests reserved to proceed after a delay instead of being refused"
        );
        describe_histogram!(
            "tollgate_decision_seconds",
            Unit::Seconds,
            "Time to make a rate-limit decision (sampled)"
        );
    });
}

impl LimiterMetrics {
    /// The handles of a limiter for `resource` and the strategy of `policy`
    /// (the strategies of a compound policy joined by `+`, e.g.
    /// `token_bucket+sliding_window`): those of `shared` when it has these
    /// labels, otherwise new ones registered with the recorder in effect now.
    pub(crate) fn for_limiter(shared: Option<&Arc<Self>>, resource: &str, policy: &Policy) -> Arc<Self> {
        let resource = if resource.is_empty() {
            "default".to_owned()
        } else {
            resource.to_owned()
        };
        let strategy: Vec<&str> = policy.limits().iter().map(|l| l.strategy().name()).collect();
        let labels = [("resource", resource), ("strategy", strategy.join("+"))];
        match shared {
            Some(shared) if shared.labels == labels => Arc::clone(shared),
            _ => Arc::new(Self::register(labels)),
        }
    }

    fn register(labels: [(&'static str, String); 2]) -> Self {
        describe();
        Self {
            allowed: counter!("tollgate_allowed_total", &labels),
            denied: counter!("tollgate_denied_total", &labels),
            backend_errors: counter!("tollgate_backend_errors_total", &labels),
            fail_open: counter!("tollgate_fail_open_total", &labels),
            deny_cache_hits: counter!("tollgate_deny_cache_hits_total", &labels),
            fallback: counter!("tollgate_fallback_total", &labels),
            circuit_open: counter!("tollgate_circuit_open_total", &labels),
            shadow_denied: counter!("tollgate_shadow_denied_total", &labels),
            latency: histogram!("tollgate_decision_seconds", &labels),
            labels,
        }
    }

    /// The counters of a limiter's leases: decisions made from a lease,
    /// and units given back.
    pub(crate) fn lease_counters(&self) -> (Counter, Counter) {
        (
            counter!("tollgate_lease_decisions_total", &self.labels),
            counter!("tollgate_lease_returned_units_total", &self.labels),
        )
    }

    /// Counts a request reserved to proceed later rather than at once
    /// (`tollgate_delayed_total`, registered at its first use: most
    /// limiters never delay).
    pub(crate) fn delayed(&self) {
        counter!("tollgate_delayed_total", &self.labels).increment(1);
    }

    /// Counts a decision.
    #[inline]
    pub(crate) fn decided(&self, allowed: bool) {
        if allowed { &self.allowed } else { &self.denied }.increment(1);
    }

    /// Counts a denial answered from the deny cache.
    pub(crate) fn deny_cache_hit(&self) {
        self.deny_cache_hits.increment(1);
    }

    /// Counts a request shadow mode allowed that enforcement would deny.
    pub(crate) fn shadow_denied(&self) {
        self.shadow_denied.increment(1);
    }

    /// Counts a decision of the fallback limiter.
    pub(crate) fn fell_back(&self) {
        self.fallback.increment(1);
    }

    /// Counts a request kept from the store by an open circuit breaker.
    pub(crate) fn circuit_open(&self) {
        self.circuit_open.increment(1);
    }

    /// Counts a decision the backend failed to make.
    pub(crate) fn backend_error(&self) {
        self.backend_errors.increment(1);
    }

    /// Counts an admission under fail-open.
    pub(crate) fn failed_open(&self) {
        self.fail_open.increment(1);
    }

    /// The start of this decision, in nanoseconds, when it is one to time
    /// (one in [`LATENCY_SAMPLE`] per thread).
    #[inline]
    pub(crate) fn start_sample(&self) -> Option<u64> {
        let due = SAMPLE.with(|n| {
            let next = n.get().wrapping_add(1);
            n.set(next);
            next % LATENCY_SAMPLE == 0
        });
        due.then(|| SystemClock.now_nanos())
    }

    /// Records a sampled decision's duration.
    #[inline]
    pub(crate) fn finish_sample(&self, started: Option<u64>) {
        if let Some(started) = started {
            let nanos = SystemClock.now_nanos().saturating_sub(started);
            self.latency.record(nanos as f64 / 1e9);
        }
    }
}
