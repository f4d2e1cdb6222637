//! The core's integration tests, in one test binary.
//!
//! `memory_reclaim` is a binary of its own: it installs a counting global
//! allocator and measures process-wide heap bytes, which tests running
//! beside it would disturb.

mod acquire;
mod backends_agree;
mod calendar;
mod charge;
mod compound;
mod concurrency;
mod decide_now;
mod holds;
mod leases;
mod limiter_api;
mod live;
mod metrics;
mod operations;
mod overrides;
mod permits;
mod prometheus;
mod protection;
mod reports;
mod reservations;
mod snapshot;
mod store_call;
mod strategy_properties;
mod support;
mod together;
mod top_keys;
mod zero_policy;
