//! Request traces: the format-neutral model ([`model`], [`problem`]) and
//! the readers of the input formats ([`csv`], [`access_log`]), which read
//! their input one line at a time ([`lines`]).
//!
//! The model knows nothing of the formats; each format reader builds a
//! [`Trace`] with a [`model::TraceBuilder`] and reports a
//! [`problem::ParseError`].

pub mod access_log;
pub mod csv;
mod csv_records;
mod fields;
mod lines;
mod model;
mod problem;

pub use model::{Names, Request, Skipped, Trace};
pub use problem::TraceError;
