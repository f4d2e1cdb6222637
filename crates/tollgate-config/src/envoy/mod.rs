//! Envoy rate-limit configuration files, in the YAML format of Envoy's
//! reference rate-limit service (`envoyproxy/ratelimit`): a `domain` and a
//! tree of `descriptors`, each with a `key`, an optional `value`, an
//! optional `rate_limit` (`unit` and `requests_per_unit`, or `unlimited:
//! true`, with an optional `name` and `replaces`), `shadow_mode`,
//! `detailed_metric` and nested `descriptors`.
//!
//! [`EnvoyFile::parse`] reads one file; [`PolicySet`](crate::PolicySet)
//! loads such files beside a tollgate policy file and builds a limiter per
//! limit, found for a request's descriptor by [`Domain::find`].
//!
//! ## From descriptors to resources and keys
//!
//! A request's descriptor is a list of `(key, value)` entries; it matches
//! the node reached by following one entry per level, trying at each level
//! the node for `key` with exactly that `value`, then a node whose value
//! ends in `*` and is a prefix of the value, then the node for `key` alone.
//! Only a node reached by the last entry applies its limit (a descriptor
//! with more or fewer entries than the path of a limit does not match it).
//!
//! - The **resource** of a limit ([`Rule::resource`]) is its node's path:
//!   the domain, then each level's `key` or `key=value`, joined by `.`, each
//!   part escaped so that different paths never share a name
//!   (`messaging.message_type=marketing.to_number`).
//! - The **key** of a request ([`descriptor_key`]) is the values of its
//!   entries, escaped and joined by `.`: every distinct value gets its own
//!   counter, as in Envoy's own service, also under a node that names no
//!   value.

mod descriptors;
mod domain;
mod file;
pub(crate) mod limiters;
mod unit;

pub use descriptors::descriptor_key;
pub use domain::{override_key, Domain, DomainRule};
pub use file::{EnvoyFile, RateLimit, Rule, MAX_DESCRIPTORS};
pub use unit::Unit;
