//! One mapping from a decision to response headers, for every framework:
//! the mode a layer is built with ([`HeaderMode`]), the header names and
//! numeric values ([`field`]), structured-field text for the IETF draft
//! ([`structured_field`]), and one decision's headers ([`RateHeaders`]).

mod field;
mod mode;
mod rate_headers;
mod structured_field;

#[cfg(feature = "actix")]
pub(crate) use field::FieldValue;
pub use mode::HeaderMode;
pub(crate) use rate_headers::{ceil_secs, write_denial, RateHeaders};
