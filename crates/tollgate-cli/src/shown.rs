//! Keys and field values as printed for people: escaped so control
//! characters stay visible, and shortened when long, so a 10 MB key does not
//! make a 10 MB table. Machine output (the decisions file) is never
//! shortened.

/// The most characters of a key or value printed before it is cut.
pub const SHOWN_CHARS: usize = 64;

/// `text` with Rust's debug escapes (no surrounding quotes); when that is
/// longer than [`SHOWN_CHARS`] characters, its first [`SHOWN_CHARS`]
/// followed by `…` and the full length in bytes, such as
/// `aaaa…aaaa… (10485760 bytes)`.
pub fn shown(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().flat_map(char::escape_debug).enumerate() {
        if count == SHOWN_CHARS {
            out.push_str(&format!("… ({} bytes)", text.len()));
            return out;
        }
        out.push(c);
    }
    out
}

/// [`shown`] in double quotes, for values quoted in messages: `"soon"`.
pub fn quoted(text: &str) -> String {
    format!("\"{}\"", shown(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_escaped_only() {
        assert_eq!(shown("10.0.0.1"), "10.0.0.1");
        assert_eq!(shown("tab\there \"q\""), "tab\\there \\\"q\\\"");
        assert_eq!(quoted("soon"), "\"soon\"");
        let exact = "x".repeat(SHOWN_CHARS);
        assert_eq!(shown(&exact), exact);
    }

    #[test]
    fn long_text_is_cut_with_its_length() {
        let long = "é".repeat(5_000_000);
        let text = shown(&long);
        assert_eq!(text, format!("{}… (10000000 bytes)", "é".repeat(SHOWN_CHARS)));
        // Escapes count as the characters they print.
        let text = shown(&"\n".repeat(100));
        assert_eq!(text, format!("{}… (100 bytes)", "\\n".repeat(SHOWN_CHARS / 2)));
    }
}
