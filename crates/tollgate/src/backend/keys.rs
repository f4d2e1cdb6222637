//! The key layout shared by every backend that stores state under string keys.
//!
//! A state key is `{prefix}:{resource}:{strategy}:{key}`. The prefix and the
//! resource are escaped (`%`, `:`, `{`, `}` and bytes outside printable ASCII
//! become `%XX`) so the first three separators are always real and two
//! different (resource, key) pairs can never produce the same state key. The
//! user's key comes last, byte for byte, so it needs no escaping. The default
//! policy of a resource-scoped limiter uses the empty resource, which no named
//! resource can have.

use crate::strategy::Strategy;

/// The bytes every state key of `(prefix, resource, strategy)` starts with.
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
