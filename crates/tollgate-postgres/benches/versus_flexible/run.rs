//! One run's figures, and the latencies they come from.

use crate::meter::CpuPerDecision;

/// What one run of one contender measured.
#[derive(Clone, Copy, Default)]
pub(crate) struct Run {
    pub(crate) per_second: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) cpu: CpuPerDecision,
    /// Decisions that were denied or failed: none are expected (the limit
    /// is never reached), so any is reported.
    pub(crate) not_admitted: u64,
}

/// The p-th percentile (0..=100) of `sorted`, nearest rank, as the Node.js
/// driver computes it.
pub(crate) fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1])
}
