//! # tollgate
//!
//! Rate limiting with exact, documented semantics: fixed window, approximate
//! sliding window, token bucket and leaky bucket (an admission meter), in
//! memory (the default) or on any store that implements
//! [`backend::store::Store`].
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Limiter, Strategy};
//!
//! let limiter = Limiter::builder()
//!     .strategy(Strategy::FixedWindow)
//!     .limit(100)
//!     .window(Duration::from_secs(60))
//!     .build()?;
//! let decision = limiter.check("user-123");
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 99);
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! Every strategy is a pure function in [`strategy`]; a backend keeps the
//! state between calls and answers a limiter's one question,
//! [`backend::Call`], by applying those functions to it (in memory, through
//! the [`backend::store::Store`] adapter, or, on Redis, in scripts ported
//! from them and checked against them), so all of them make the same
//! decisions.
//!
//! ## What is where
//!
//! The crate's root holds what a caller of the library uses: the two
//! things to hold, a [`Limiter`] (one policy) and [`Limiters`] (a default
//! policy and named ones, replaced while they serve), their builders, and
//! what they take and give: policies, decisions, errors, operations, key
//! lists, reservations and the in-memory backend. The rest sits in a module
//! named for what it holds:
//!
//! - [`clock`]: the clocks a limiter reads ([`clock::ManualClock`] for
//!   tests);
//! - [`protection`]: what protects a remote store (the deny cache, the
//!   circuit breaker, leases);
//! - [`top`]: the heaviest keys a limiter counts;
//! - [`together`]: deciding the parts of one request together;
//! - [`metrics`]: the names of the metrics every limiter records;
//! - [`strategy`]: the strategies as pure functions;
//! - [`backend`]: what a store's implementer needs (the
//!   [`backend::Backend`] and [`backend::Binding`] traits, the question
//!   and its answer, [`backend::Call`] and [`backend::Answer`], the
//!   [`backend::store::Store`] adapter, [`backend::Tick`], the store's
//!   errors).
//!
//! ## Documentation
//!
//! - [The guide](_documentation::guide): every topic in reading order,
//!   from the library to the service, operations and performance.
//! - [Decision semantics](_documentation::semantics): the contract every
//!   backend meets, strategy by strategy.
//! - [Semantics notes](_documentation::semantics_notes): the choices the
//!   contract leaves open, the state encoding and the key layout.
//! - [Choosing a strategy](_documentation::choosing_a_strategy): decision
//!   matrix, window boundaries worked through, the token/leaky bucket
//!   equivalence.
//! - [Architecture](_documentation::architecture): how the crates fit
//!   together and why.
//! - [Concurrency](_documentation::concurrency): the in-memory backend's
//!   design.
//! - [Protecting the store](_documentation::protecting_the_store): the deny
//!   cache, the circuit breaker and the fallback limiter for remote stores.
//!
//! ## Features
//!
//! - `testing`: compiles the module `tollgate::testing`, stores for tests
//!   and examples: `MapStore`, a reference [`backend::store::Store`] on a
//!   hash map, and
//!   `FlakyStore`, which wraps a store and fails on demand to exercise fail
//!   policies. Enable it on a dev-dependency only.

// `pub` means reachable from outside the crate: an item that is not says
// `pub(crate)`.
#![warn(unreachable_pub)]

pub mod _documentation;
pub mod backend;
pub mod calendar;
pub mod clock;
mod decision;
mod error;
mod keylist;
mod lease;
mod limiter;
mod limiters;
pub mod metrics;
mod millis;
mod operation;
mod overrides;
mod policy;
pub mod protection;
mod redact;
pub mod strategy;
#[cfg(feature = "testing")]
pub mod testing;
pub mod top;

/// Helpers the other tollgate crates share with this one. Not public API:
/// anything here may change or go away in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::millis::ceil_millis;
    pub use crate::redact::redact_url;
}

/// The crate's README (its page on crates.io): its code blocks, compiled
/// and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;

/// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

pub use backend::memory::MemoryBackend;
pub use decision::{Decision, Listed};
pub use error::{ConfigError, Error};
pub use keylist::KeyList;
pub use limiter::{together, Charge, FailPolicy, Hold, Limiter, LimiterBuilder, Permit, Reservation};
pub use limiters::{Limiters, LimitersBuilder, Resource};
pub use operation::Operation;
pub use overrides::Overrides;
pub use policy::{Limit, Policy};
pub use strategy::Strategy;
