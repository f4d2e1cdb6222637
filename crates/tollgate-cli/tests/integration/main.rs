//! The integration tests of the `tollgate` command, in one binary: each
//! module runs the real binary through [`support::Tollgate`].

mod support;

mod access_log;
mod calendar_quota;
mod completions;
mod compound;
mod config;
mod decisions;
mod errors;
mod fleet_faults;
mod kubernetes;
mod package;
mod plot;
mod postgres_backend;
mod progress;
mod readme;
mod redis_backend;
mod serve;
mod settings;
mod state_file;
mod waiting;
