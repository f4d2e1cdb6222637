//! Parsers for the headers that proxies use to pass on the client address:
//! `Forwarded` (RFC 7239), `X-Forwarded-For` and `X-Real-IP`.
//!
//! Each returns the hops of all header lines in order, the client first and
//! the nearest proxy last; a hop that is not an IP address is `None`.
//! Nothing here panics on any input.

use std::net::{IpAddr, Ipv6Addr};

/// One hop: its address, or `None` when the value is malformed, `unknown`
/// or an obfuscated identifier (none of which can be a key).
pub(crate) type Hop = Option<IpAddr>;

/// The hops of `X-Forwarded-For` lines: comma-separated addresses, each
/// optionally with a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`).
pub(crate) fn x_forwarded_for<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Vec<Hop> {
    let mut hops = Vec::new();
    for line in lines {
        match std::str::from_utf8(line) {
            Ok(line) => hops.extend(line.split(',').map(|hop| node(hop.trim()))),
            Err(_) => hops.push(None),
        }
    }
    hops
}

/// The single address of `X-Real-IP`; `None` when it is malformed or the
/// header is repeated.
pub(crate) fn x_real_ip<'a>(mut lines: impl Iterator<Item = &'a [u8]>) -> Hop {
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    node(std::str::from_utf8(line).ok()?.trim())
}

/// The `for=` nodes of `Forwarded` lines (RFC 7239 section 4). An element
/// without exactly one `for` parameter, or one that does not parse, is a
/// malformed hop.
pub(crate) fn forwarded<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Vec<Hop> {
    let mut hops = Vec::new();
    for line in lines {
        match std::str::from_utf8(line) {
            Ok(line) => {
                for element in split_unquoted(line, b',') {
                    hops.push(for_node(element));
                }
            }
            Err(_) => hops.push(None),
        }
    }
    hops
}

/// The address of the single `for` parameter of one element.
fn for_node(element: &str) -> Hop {
    let mut found = None;
    for pair in split_unquoted(element, b';') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            return None; // a parameter must not occur twice in one element
        }
        found = Some(value.trim());
    }
    let value = found?;
    match value.strip_prefix('"') {
        Some(quoted) => node(&unquote(quoted.strip_suffix('"')?)?),
        None => node(value),
    }
}

/// Splits at `sep` outside double quotes (honouring backslash escapes).
fn split_unquoted(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut pos = 0;
    let mut quoted = false;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        while pos < bytes.len() {
            let b = bytes[pos];
            pos += 1;
            match b {
                b'\\' if quoted => pos += 1,
                b'"' => quoted = !quoted,
                _ if b == sep && !quoted => {
                    let part = &s[start..pos - 1];
                    start = pos;
                    return Some(part);
                }
                _ => {}
            }
        }
        done = true;
        Some(s.get(start..).unwrap_or_default())
    })
}

/// The content of a quoted string without its escapes; `None` when an
/// escape is unfinished or a quote is unescaped.
fn unquote(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// A node: `IPv4`, `IPv4:port`, `[IPv6]`, `[IPv6]:port`, or a bare IPv6
/// address (as some proxies write in `X-Forwarded-For`).
fn node(s: &str) -> Hop {
    if let Some(rest) = s.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    // IPv4 with a port; an IPv6 address without brackets has parsed above.
    let (addr, port) = s.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    addr.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Hop {
        Some(s.parse().unwrap())
    }

    fn xff(lines: &[&str]) -> Vec<Hop> {
        x_forwarded_for(lines.iter().map(|l| l.as_bytes()))
    }

    fn fwd(lines: &[&str]) -> Vec<Hop> {
        forwarded(lines.iter().map(|l| l.as_bytes()))
    }

    #[test]
    fn x_forwarded_for_lists_hops_across_lines() {
        assert_eq!(
            xff(&["203.0.113.195, 70.41.3.18", "150.172.238.178"]),
            vec![ip("203.0.113.195"), ip("70.41.3.18"), ip("150.172.238.178")]
        );
        assert_eq!(
            xff(&["192.0.2.1:4711,[2001:db8::1]:443 , 2001:db8::2,[2001:db8::3]"]),
            vec![
                ip("192.0.2.1"),
                ip("2001:db8::1"),
                ip("2001:db8::2"),
                ip("2001:db8::3")
            ]
        );
    }

    #[test]
    fn x_forwarded_for_marks_malformed_hops() {
        for bad in [
            "",
            "unknown",
            "1.2.3",
            "1.2.3.4:",
            "1.2.3.4:99999",
            "1.2.3.4:x",
            "[::1",
            "[::1]x",
            "[1.2.3.4]",
            "::1]:80",
            "1.2.3.4 5.6.7.8",
            "2001:db8::1:80:",
            "😀",
        ] {
            assert_eq!(xff(&[bad]), vec![None], "{bad:?}");
        }
        assert_eq!(
            xff(&["1.2.3.4,,5.6.7.8"]),
            vec![ip("1.2.3.4"), None, ip("5.6.7.8")]
        );
        assert_eq!(x_forwarded_for([&b"\xff\xfe"[..]].into_iter()), vec![None]);
    }

    #[test]
    fn x_real_ip_is_one_address() {
        assert_eq!(x_real_ip([&b" 192.0.2.9 "[..]].into_iter()), ip("192.0.2.9"));
        assert_eq!(x_real_ip([&b"192.0.2.9, 192.0.2.10"[..]].into_iter()), None);
        assert_eq!(x_real_ip([&b"192.0.2.9"[..], b"192.0.2.10"].into_iter()), None);
        assert_eq!(x_real_ip(std::iter::empty()), None);
    }

    #[test]
    fn forwarded_takes_the_for_parameter_of_each_element() {
        assert_eq!(
            fwd(&[r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#]),
            vec![ip("192.0.2.60"), ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            fwd(&["for=192.0.2.43", r#"proto=https;for="198.51.100.17:80""#]),
            vec![ip("192.0.2.43"), ip("198.51.100.17")]
        );
        // Separators inside quotes do not split.
        assert_eq!(
            fwd(&[r#"for="192.0.2.1";host="a,b;c", for=192.0.2.2"#]),
            vec![ip("192.0.2.1"), ip("192.0.2.2")]
        );
        assert_eq!(fwd(&[r#"for="\[2001:db8::1\]""#]), vec![ip("2001:db8::1")]);
    }

    #[test]
    fn forwarded_marks_unidentifiable_and_malformed_elements() {
        for bad in [
            "for=unknown",
            "for=_hidden",
            "proto=http",
            "for=192.0.2.1;for=192.0.2.2",
            r#"for="192.0.2.1"#,
            r#"for="192.0.2.1\"#,
            "for",
            "",
            r#"for="[2001:db8::1]:http""#,
            r#"for="a"b""#,
        ] {
            assert_eq!(fwd(&[bad]), vec![None], "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Any header text parses without panicking, with one hop per comma
        /// for `X-Forwarded-For`; a hop is an address only when its token is
        /// made of address characters alone.
        #[test]
        fn any_text_parses_without_panicking(line in r#"[0-9a-fA-F.:\[\] ,;="_ForuknwXx\\-]{0,64}"#) {
            let hops = xff(&[line.as_str()]);
            let tokens: Vec<&str> = line.split(',').collect();
            proptest::prop_assert_eq!(hops.len(), tokens.len());
            for (hop, token) in hops.iter().zip(&tokens) {
                if hop.is_some() {
                    let address_chars = |c: char| c.is_ascii_hexdigit() || ".:[]".contains(c);
                    proptest::prop_assert!(token.trim().chars().all(address_chars), "{:?} became {:?}", token, hop);
                }
            }
            let _ = fwd(&[line.as_str()]);
            let _ = x_real_ip([line.as_bytes()].into_iter());
        }
    }
}
