//! The synchronisation primitives of the in-memory table: the standard
//! library's, or [loom](https://docs.rs/loom)'s when the crate is built
//! with `--cfg tollgate_loom`, so that loom can explore the interleavings
//! of the table's lock-free code (`.ci/loom` runs the models in
//! `backend::loom_models`).
//!
//! The cfg is the crate's own rather than the usual `loom`: `RUSTFLAGS`
//! reach every crate of the build, and under `cfg(loom)` tokio leaves out
//! its `net` module, which a dev-dependency (the Prometheus exporter's HTTP
//! listener) needs.
//!
//! Without the cfg these are the standard library's own items, re-exported:
//! the table compiles to exactly the code it would with them imported
//! directly.
//!
//! Where loom's API differs from the standard library's (no `const fn new`,
//! statics through `loom::lazy_static!`, no `const` thread-local
//! initialisers, `UnsafeCell` accessed through closures), the modules using
//! them say so next to a `cfg(tollgate_loom)` variant.

#[cfg(not(tollgate_loom))]
pub(crate) use std::{
    cell::UnsafeCell,
    hint::spin_loop,
    sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering},
    sync::{Mutex, MutexGuard},
    thread::yield_now,
    thread_local,
};

#[cfg(tollgate_loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    hint::spin_loop,
    sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering},
    sync::{Mutex, MutexGuard},
    thread::yield_now,
    thread_local,
};
