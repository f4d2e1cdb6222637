//! Envoy rate-limit configuration files written for tests and benchmarks.

use std::path::Path;

/// Writes to `path` an Envoy file of domain `domain` with `descriptors`
/// top-level descriptors `k0`, `k1`, …, each a limit of its own with its
/// own rate (1,000,000 + i per minute): the large file whose memory and
/// reloads the service's tests and benchmarks measure.
///
/// # Panics
///
/// When the file cannot be written.
pub fn write_one_limit_per_descriptor(path: &Path, domain: &str, descriptors: usize) {
    let mut text = format!("domain: {domain}\ndescriptors:\n");
    for i in 0..descriptors {
        text.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{ unit: minute, requests_per_unit: {} }}\n",
            1_000_000 + i
        ));
    }
    std::fs::write(path, text).unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
}
