//! The key layout shared by every backend that stores state under string
//! keys.

use std::time::Duration;

use crate::policy::Limit;
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

/// The state keys of a compound policy (one of several limits):
/// `{prefix}:{{resource}:{key}}:{strategy}:{window}` for each limit, e.g.
/// `tollgate:{api:user-1}:token_bucket:1s`, with the prefix, the resource and
/// the caller's key escaped.
///
/// The braces are a Redis Cluster hash tag: all of a key's limits hash to one
/// slot, so one script can update them atomically, while different keys
/// spread over the cluster. The tag always holds the `:` between resource and
/// key, so it is never empty, and escaping keeps any brace of the key out of
/// it. A limit is named by its strategy and window, which
/// [`crate::Policy::compound`] requires to be unique within a policy, so a
/// limit whose `L` changes keeps its state. Single-limit policies keep the
/// layout of [`namespace`]; the [key
/// layout](crate::_documentation::semantics_notes#key-layout) says what this
/// means for existing keys.
#[derive(Clone, Debug)]
pub struct CompoundKeys {
    head: Vec<u8>,
    tails: Box<[Vec<u8>]>,
}

impl CompoundKeys {
    /// The layout of `limits` under `prefix` and `resource`.
    pub fn new(prefix: &str, resource: &str, limits: &[Limit]) -> Self {
        let mut head = Vec::with_capacity(prefix.len() + resource.len() + 4);
        escape_into(prefix.as_bytes(), &mut head);
        head.extend_from_slice(b":{");
        escape_into(resource.as_bytes(), &mut head);
        head.push(b':');
        let tails = limits
            .iter()
            .map(|l| {
                let mut tail = format!("}}:{}:", l.strategy().name()).into_bytes();
                match l.calendar() {
                    Some(calendar) => escape_into(calendar.label().as_bytes(), &mut tail),
                    None => tail.extend_from_slice(window_label(l.window()).as_bytes()),
                }
                tail
            })
            .collect();
        Self { head, tails }
    }

    /// The number of limits.
    pub fn len(&self) -> usize {
        self.tails.len()
    }

    /// Whether there are no limits.
    pub fn is_empty(&self) -> bool {
        self.tails.is_empty()
    }

    /// The name of limit `index`'s state, the key left out: what a state
    /// file calls its table (a NUL stands for the key, which no escaped
    /// part holds).
    pub(crate) fn table_name(&self, index: usize) -> Box<[u8]> {
        [self.head.as_slice(), b"\0", &self.tails[index]].concat().into()
    }

    /// Writes the state key of limit `index` for the caller's `key` into
    /// `out`, replacing its contents.
    ///
    /// # Panics
    ///
    /// When `index` is not below [`Self::len`].
    pub fn write(&self, index: usize, key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.head);
        escape_into(key, out);
        out.extend_from_slice(&self.tails[index]);
    }

    /// The state key of limit `index` for the caller's `key`.
    ///
    /// # Panics
    ///
    /// When `index` is not below [`Self::len`].
    pub fn key(&self, index: usize, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + key.len() + 32);
        self.write(index, key, &mut out);
        out
    }
}

/// A window as the shortest exact text in one unit: `1s`, `3600s`, `250ms`,
/// `10us`, `1500ns`.
fn window_label(window: Duration) -> String {
    let nanos = window.as_nanos();
    if nanos.is_multiple_of(1_000_000_000) {
        format!("{}s", nanos / 1_000_000_000)
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{}us", nanos / 1_000)
    } else {
        format!("{nanos}ns")
    }
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

    #[test]
    fn compound_keys_share_a_non_empty_hash_tag_whatever_the_key() {
        let limits = [
            Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1)).unwrap(),
            Limit::new(Strategy::FixedWindow, 100, Duration::from_millis(1500)).unwrap(),
        ];
        let keys = CompoundKeys::new("tollgate", "api", &limits);
        assert_eq!(
            keys.key(0, b"user-1"),
            b"tollgate:{api:user-1}:token_bucket:1s".to_vec()
        );
        assert_eq!(
            keys.key(1, b"user-1"),
            b"tollgate:{api:user-1}:fixed_window:1500ms".to_vec()
        );
        // Braces in a key cannot close the tag early or empty it.
        assert_eq!(
            keys.key(0, b"}x{"),
            b"tollgate:{api:%7Dx%7B}:token_bucket:1s".to_vec()
        );
        let default = CompoundKeys::new("tollgate", "", &limits);
        assert_eq!(default.key(0, b""), b"tollgate:{:}:token_bucket:1s".to_vec());
    }
}
