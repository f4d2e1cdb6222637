//! Structured-field text (RFC 8941) for the IETF draft's headers.

/// The largest integer a structured field can carry (RFC 8941 §3.3.1).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Appends the name of a policy item as a structured-field string (RFC 8941
/// §4.1.6): `name`, followed by `[index]` for a limit of a compound policy,
/// between double quotes, with `"` and `\` escaped by a backslash, and every
/// character a string cannot hold (anything but printable ASCII) replaced
/// by `?`.
pub(crate) fn push_item_name(out: &mut String, name: &str, index: Option<usize>) {
    use std::fmt::Write;
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    if let Some(index) = index {
        // Writing to a `String` cannot fail.
        let _ = write!(out, "[{index}]");
    }
    out.push('"');
}

/// Appends the parameter `;key=n` (RFC 8941 §4.1.1.2) with `n` as a
/// structured-field integer (§4.1.4), clamped into its range. `key` must
/// be a valid key (a lower-case letter here).
pub(crate) fn push_sf_param(out: &mut String, key: &str, n: u64) {
    use std::fmt::Write;
    out.push(';');
    out.push_str(key);
    out.push('=');
    // Writing to a `String` cannot fail.
    let _ = write!(out, "{}", n.min(SF_INTEGER_MAX));
}
