//! Parsers of request fields: a CSV trace's `time` and `cost`, and the
//! resource name of either format.

use super::problem::{Problem, TimeError};

/// Parses a `time` field into nanoseconds since the Unix epoch.
///
/// Accepts integer milliseconds since the epoch (`1714564800250`) or an RFC
/// 3339 timestamp with any offset (`2024-05-01T12:00:00.25+02:00`);
/// surrounding whitespace is ignored.
///
/// # Errors
///
/// [`TimeError`] when the field is empty, malformed, before the epoch, or
/// too late for 64-bit nanoseconds (after 2554-07-21T23:34:33Z).
pub fn parse_time(field: &str) -> Result<u64, TimeError> {
    let s = field.trim();
    if s.is_empty() {
        return Err(TimeError::Empty);
    }
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if negative && digits.bytes().any(|b| b != b'0') {
            return Err(TimeError::Negative(field.to_owned()));
        }
        // All digits: the only possible parse failure is overflow.
        return digits
            .parse::<u64>()
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
            .ok_or_else(|| TimeError::Overflow(field.to_owned()));
    }
    let at = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| TimeError::Syntax {
        value: field.to_owned(),
        detail: e.to_string(),
    })?;
    let secs = u64::try_from(at.timestamp()).map_err(|_| TimeError::Negative(field.to_owned()))?;
    secs.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(at.timestamp_subsec_nanos())))
        .ok_or_else(|| TimeError::Overflow(field.to_owned()))
}

/// Parses a `cost` field: a non-negative integer, 1 when empty; surrounding
/// whitespace is ignored.
///
/// # Errors
///
/// [`Problem::Cost`] when the field is not a non-negative integer that fits
/// in 64 bits.
pub fn parse_cost(field: &str) -> Result<u64, Problem> {
    let s = field.trim();
    if s.is_empty() {
        return Ok(1);
    }
    let bad = |reason| Problem::Cost {
        value: field.to_owned(),
        reason,
    };
    if let Some(rest) = s.strip_prefix('-') {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("must not be negative"));
        }
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("expected a non-negative integer"));
    }
    s.parse::<u64>().map_err(|_| bad("too large for 64 bits"))
}

/// Parses a `resource` field: the name of the policy that applies, with
/// surrounding whitespace ignored; `None` when empty (the default policy).
///
/// # Errors
///
/// [`Problem::Resource`] when the name breaks the core's rule for resource
/// names ([`tollgate::Limiters::check_resource_name`]), the same rule policy files
/// follow, so every resource a trace names can have a policy.
pub fn parse_resource(field: &str) -> Result<Option<&str>, Problem> {
    let name = field.trim();
    if name.is_empty() {
        return Ok(None);
    }
    tollgate::Limiters::check_resource_name(name).map_err(|err| Problem::Resource {
        value: field.to_owned(),
        reason: err.reason().to_owned(),
    })?;
    Ok(Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_milliseconds() {
        assert_eq!(parse_time("0"), Ok(0));
        assert_eq!(parse_time("1714564800250"), Ok(1_714_564_800_250_000_000));
        assert_eq!(parse_time(" 15 "), Ok(15_000_000));
        assert_eq!(parse_time("-0"), Ok(0));
    }

    #[test]
    fn integer_milliseconds_out_of_range() {
        // u64::MAX nanoseconds is 18_446_744_073_709.551615 ms.
        assert_eq!(parse_time("18446744073709"), Ok(18_446_744_073_709_000_000));
        assert!(matches!(
            parse_time("18446744073710"),
            Err(TimeError::Overflow(_))
        ));
        assert!(matches!(
            parse_time("99999999999999999999999"),
            Err(TimeError::Overflow(_))
        ));
        assert!(matches!(parse_time("-1"), Err(TimeError::Negative(_))));
    }

    #[test]
    fn rfc3339_with_offsets() {
        let utc = parse_time("2024-05-01T10:00:00Z").unwrap();
        assert_eq!(utc, 1_714_557_600_000_000_000);
        assert_eq!(parse_time("2024-05-01T12:00:00+02:00"), Ok(utc));
        assert_eq!(parse_time("2024-05-01T05:30:00-04:30"), Ok(utc));
        assert_eq!(parse_time("2024-05-01T10:00:00.000000001Z"), Ok(utc + 1));
        assert_eq!(parse_time("2024-05-01T12:00:00.25+02:00"), Ok(utc + 250_000_000));
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
    }

    #[test]
    fn rfc3339_out_of_range() {
        assert!(matches!(
            parse_time("1969-12-31T23:59:59.5Z"),
            Err(TimeError::Negative(_))
        ));
        assert!(matches!(
            parse_time("1970-01-01T00:30:00+01:00"),
            Err(TimeError::Negative(_))
        ));
        assert!(parse_time("2554-07-21T23:34:33Z").is_ok());
        assert!(matches!(
            parse_time("2554-07-21T23:34:34Z"),
            Err(TimeError::Overflow(_))
        ));
        assert!(matches!(
            parse_time("9999-12-31T23:59:59Z"),
            Err(TimeError::Overflow(_))
        ));
    }

    #[test]
    fn malformed_times() {
        for bad in [
            "abc",
            "1.5",
            "12ms",
            "2024-05-01",
            "2024-05-01T10:00:00",
            "--1",
            "-",
            "+5",
        ] {
            assert!(matches!(parse_time(bad), Err(TimeError::Syntax { .. })), "{bad}");
        }
        assert_eq!(parse_time("  "), Err(TimeError::Empty));
    }

    #[test]
    fn costs() {
        assert_eq!(parse_cost(""), Ok(1));
        assert_eq!(parse_cost(" "), Ok(1));
        assert_eq!(parse_cost("0"), Ok(0));
        assert_eq!(parse_cost(" 7 "), Ok(7));
        assert_eq!(parse_cost("18446744073709551615"), Ok(u64::MAX));
        let reason = |s| match parse_cost(s) {
            Err(Problem::Cost { reason, .. }) => reason,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(reason("-3"), "must not be negative");
        assert_eq!(reason("1.5"), "expected a non-negative integer");
        assert_eq!(reason("+2"), "expected a non-negative integer");
        assert_eq!(reason("two"), "expected a non-negative integer");
        assert_eq!(reason("18446744073709551616"), "too large for 64 bits");
    }
}
