//! Policy files end to end: loading each format, environment references, every
//! kind of mistake and its message, and limiters built on memory, on Redis and on PostgreSQL.

mod support;

mod calendar;
mod combined;
mod compound;
mod concurrency;
mod env;
mod envoy_shapes;
mod formats;
mod kubernetes;
mod memory;
mod mistakes;
#[cfg(feature = "postgres")]
mod postgres;
mod postgres_mistakes;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "watch")]
mod set_watch;
mod setting_mistakes;
mod settings;
#[cfg(feature = "watch")]
mod watch;
