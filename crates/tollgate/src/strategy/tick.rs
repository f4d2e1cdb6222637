//! The unit of a backend's clock: what strategies count time in.

use std::time::Duration;

/// The length of one clock tick of a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Nanosecond ticks (the in-memory backend).
    Nanos,
    /// Microsecond ticks (stores whose arithmetic is exact only to 2^53).
    Micros,
}

impl Tick {
    /// The duration of `ticks` ticks.
    pub fn duration(self, ticks: u64) -> Duration {
        match self {
            Tick::Nanos => Duration::from_nanos(ticks),
            Tick::Micros => Duration::from_micros(ticks),
        }
    }

    /// Converts nanoseconds since the epoch into ticks (rounding down).
    pub fn from_nanos(self, nanos: u64) -> u64 {
        nanos / self.nanos()
    }

    /// Nanoseconds per tick.
    pub(crate) fn nanos(self) -> u64 {
        match self {
            Tick::Nanos => 1,
            Tick::Micros => 1_000,
        }
    }
}
