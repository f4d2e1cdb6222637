//! The key layout shared by every backend that stores state under string
//! keys.

use crate::strategy::Strategy;

/// The bytes every state key of `(prefix, resource, strategy)` starts with:
/// `{prefix}:{resource}:{strategy}:`, the prefix and the resource escaped.
/// A backend appends the caller's key to it, byte for byte.
///
/// Backends outside this crate that store state under string keys use it to
/// share the layout, described under [key
/// layout](crate::_documentation::semantics_notes#key-layout).
pub fn namespace(prefix: &str, resource: &str, strategy: Strategy) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + resource.len() + 20);
    escape_into(prefix.as_bytes(), &mut out);
    out.push(b':');
    escape_into(resource.as_bytes(), &mut out);
    out.push(b':');
    out.extend_from_slice(strategy.name().as_bytes());
    out.push(b':');
    out
}

fn escape_into(raw: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in raw {
        if matches!(b, b'%' | b':' | b'{' | b'}') || !(0x21..0x7f).contains(&b) {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_in_names_cannot_forge_another_namespace() {
        let a = namespace("p", "a:token_bucket", Strategy::TokenBucket);
        let b = namespace("p", "a", Strategy::TokenBucket);
        let mut forged = b.clone();
        forged.extend_from_slice(b"token_bucket:");
        assert_ne!(a, forged);
        assert_eq!(b, b"p:a:token_bucket:".to_vec());
        assert_eq!(
            namespace("p%", "{x} y", Strategy::FixedWindow),
            b"p%25:%7Bx%7D%20y:fixed_window:".to_vec()
        );
    }
}
