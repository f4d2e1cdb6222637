//! What a request costs: a constant, a number from a request header, or a
//! closure over the request.

use std::sync::Arc;

use crate::cost_error::CostError;
use crate::request::RequestInfo;

pub(crate) type CostFn = dyn Fn(&RequestInfo<'_>) -> Result<u64, CostError> + Send + Sync;

/// How the cost of each request is found; configured through
/// [`RateLimit::cost`](crate::RateLimit::cost),
/// [`RateLimit::cost_header`](crate::RateLimit::cost_header) and
/// [`RateLimit::cost_fn`](crate::RateLimit::cost_fn).
#[derive(Clone)]
pub(crate) struct Cost {
    /// What a request costs when neither a header nor a closure says, and
    /// what a request without the cost header costs.
    constant: u64,
    source: Source,
}

#[derive(Clone)]
enum Source {
    /// Every request costs the constant.
    Constant,
    /// The value of this header (lower case), or the constant without it.
    Header(Box<str>),
    /// What the closure answers.
    Custom(Arc<CostFn>),
}

impl Default for Cost {
    /// Every request costs 1.
    fn default() -> Self {
        Self {
            constant: 1,
            source: Source::Constant,
        }
    }
}

impl std::fmt::Debug for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Constant => f.debug_tuple("Cost::Constant").field(&self.constant).finish(),
            Source::Header(name) => f
                .debug_struct("Cost::Header")
                .field("name", name)
                .field("missing", &self.constant)
                .finish(),
            Source::Custom(_) => f.write_str("Cost::Custom(..)"),
        }
    }
}

impl Cost {
    /// Sets the constant cost, keeping a header or closure.
    pub(crate) fn set_constant(&mut self, cost: u64) {
        self.constant = cost;
    }

    /// Takes the cost from header `name`, which must be a valid header name.
    pub(crate) fn set_header(&mut self, name: &str) {
        self.source = Source::Header(name.to_ascii_lowercase().into_boxed_str());
    }

    /// Asks `f` for the cost.
    pub(crate) fn set_custom(&mut self, f: Arc<CostFn>) {
        self.source = Source::Custom(f);
    }

    /// The cost of `req`.
    #[inline]
    pub(crate) fn of(&self, req: &RequestInfo<'_>) -> Result<u64, CostError> {
        match &self.source {
            Source::Constant => Ok(self.constant),
            Source::Header(name) => header_cost(req, name, self.constant),
            Source::Custom(f) => f(req),
        }
    }
}

/// The cost in header `name` of `req`, or `missing` without the header.
fn header_cost(req: &RequestInfo<'_>, name: &str, missing: u64) -> Result<u64, CostError> {
    let mut values = req.header_values(name);
    let Some(value) = values.next() else {
        return Ok(missing);
    };
    let parsed = match values.next() {
        Some(_) => Err("it appears more than once"),
        None => parse_cost(value),
    };
    parsed.map_err(|problem| {
        CostError::new(format!(
            "the {name} header must be one decimal integer from 0 to {}; {problem}",
            u64::MAX
        ))
    })
}

/// A cost written in a header, as the middleware's
/// [`cost_header`](crate::RateLimit::cost_header) and `tollgate serve`'s
/// `/v1/auth` read it: decimal digits only (leading zeros allowed), no
/// sign, no spaces, no other base, no fraction, no exponent, at most
/// `u64::MAX`. The error says what is wrong ("it has a sign", "it is too
/// large", …), for a message naming the header.
///
/// ```
/// use tollgate_http::parse_cost;
///
/// assert_eq!(parse_cost(b"007"), Ok(7));
/// assert_eq!(parse_cost(b"+5"), Err("it has a sign"));
/// assert!(parse_cost(b" 5 ").is_err());
/// ```
///
/// # Errors
///
/// A short phrase naming the first problem found.
pub fn parse_cost(value: &[u8]) -> Result<u64, &'static str> {
    let digits = |bytes: &[u8]| !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit);
    match value {
        [] => Err("it is empty"),
        [b'-', rest @ ..] if digits(rest) && rest.iter().any(|&b| b != b'0') => Err("it is negative"),
        [b'+' | b'-', ..] => Err("it has a sign"),
        _ if !value.is_ascii() => Err("it is not ASCII"),
        _ if !digits(value) => Err("it holds characters other than the digits 0 to 9"),
        _ => value
            .iter()
            .try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .ok_or("it is too large"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_malformed_cost_is_named() {
        let cases: [(&[u8], &str); 12] = [
            (b"", "it is empty"),
            (b"-1", "it is negative"),
            (b"-007", "it is negative"),
            (b"-0", "it has a sign"),
            (b"+5", "it has a sign"),
            (b"\xff", "it is not ASCII"),
            ("５".as_bytes(), "it is not ASCII"),
            (b"1 0", "it holds characters other than the digits 0 to 9"),
            (b"0x10", "it holds characters other than the digits 0 to 9"),
            (b"1.0", "it holds characters other than the digits 0 to 9"),
            (b"1e3", "it holds characters other than the digits 0 to 9"),
            (b"18446744073709551616", "it is too large"),
        ];
        for (value, problem) in cases {
            assert_eq!(
                parse_cost(value),
                Err(problem),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn the_edges_of_the_range_are_exact() {
        assert_eq!(parse_cost(b"0"), Ok(0));
        assert_eq!(parse_cost(b"000"), Ok(0));
        assert_eq!(parse_cost(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_cost(b"0018446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_cost(b"99999999999999999999"), Err("it is too large"));
    }

    proptest! {
        /// Every u64, written in decimal with any number of leading zeros,
        /// reads back as itself; the same digits behind a sign or beside
        /// any other character are refused.
        #[test]
        fn decimal_integers_read_back_and_nothing_else_does(
            n in any::<u64>(),
            zeros in 0usize..4,
            junk in "[^0-9]",
            at in any::<prop::sample::Index>(),
        ) {
            let text = format!("{}{n}", "0".repeat(zeros));
            prop_assert_eq!(parse_cost(text.as_bytes()), Ok(n));
            prop_assert_eq!(text.parse::<u64>(), Ok(n));
            let mut spoiled = text.clone();
            spoiled.insert_str(at.index(text.len() + 1), &junk);
            prop_assert!(parse_cost(spoiled.as_bytes()).is_err(), "{:?}", spoiled);
        }
    }
}
