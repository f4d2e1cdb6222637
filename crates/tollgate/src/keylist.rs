//! Key lists for exemptions and deny lists: exact keys and CIDR blocks.

use std::collections::HashSet;
use std::net::IpAddr;

use crate::error::ConfigError;

/// A set of keys: exact keys, and CIDR blocks that match keys which are IP
/// addresses in text form ([exemptions and deny
/// lists](crate::_documentation::semantics#exemptions-and-deny-lists)).
///
/// An entry with a `/` is a CIDR block (`10.0.0.0/8`, `2001:db8::/32`); an
/// entry that is an IP address alone is the block of that one address; any
/// other entry is an exact key. An IPv4 block also matches the IPv4-mapped
/// IPv6 form of its addresses (`::ffff:10.1.2.3`).
///
/// ```
/// use tollgate::KeyList;
///
/// let list = KeyList::parse("exempt", ["10.0.0.0/8", "2001:db8::/32", "health-checker"])?;
/// assert!(list.contains(b"10.20.30.40"));
/// assert!(list.contains(b"::ffff:10.1.2.3"));
/// assert!(list.contains(b"2001:db8::1"));
/// assert!(list.contains(b"health-checker"));
/// assert!(!list.contains(b"192.0.2.1"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyList {
    /// Seeded like the in-memory store's tables: keys come from clients.
    exact: HashSet<Box<[u8]>, ahash::RandomState>,
    blocks: Vec<Cidr>,
}

/// An IP block: the network's bits and the prefix length, IPv4 held as
/// IPv4-mapped IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cidr {
    network: u128,
    prefix: u32,
}

impl Cidr {
    fn contains(&self, ip: u128) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u128::MAX << (128 - self.prefix)
        };
        ip & mask == self.network
    }
}

/// An address as IPv6 bits, IPv4 mapped (`::ffff:a.b.c.d`).
fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl KeyList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `entries`; errors name the entry as `{field}[i]`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for an empty entry, or an entry with a `/` that is
    /// not an IP address and a prefix length within its family
    /// (0 to 32 for IPv4, 0 to 128 for IPv6), or whose address has bits set
    /// past the prefix (`10.0.0.1/8`: write `10.0.0.0/8`).
    pub fn parse<S: AsRef<str>>(
        field: &str,
        entries: impl IntoIterator<Item = S>,
    ) -> Result<Self, ConfigError> {
        let mut list = Self::new();
        for (i, entry) in entries.into_iter().enumerate() {
            let entry = entry.as_ref();
            let error = |reason: String| ConfigError::new(format!("{field}[{i}]"), reason);
            if entry.is_empty() {
                return Err(error("an entry must not be empty".to_owned()));
            }
            if let Some((address, prefix)) = entry.split_once('/') {
                let ip: IpAddr = address
                    .parse()
                    .map_err(|_| error(format!("{address:?} in {entry:?} is not an IP address")))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let prefix: u32 = prefix
                    .parse()
                    .ok()
                    .filter(|p| *p <= max)
                    .ok_or_else(|| error(format!("{prefix:?} is not a prefix length from 0 to {max}")))?;
                let prefix = if ip.is_ipv4() { prefix + 96 } else { prefix };
                let cidr = Cidr {
                    network: bits(ip),
                    prefix,
                };
                if !cidr.contains(cidr.network) {
                    return Err(error(format!(
                        "{entry:?} has address bits set past its prefix; write the network address"
                    )));
                }
                list.blocks.push(cidr);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                list.blocks.push(Cidr {
                    network: bits(ip),
                    prefix: 128,
                });
            } else {
                list.exact.insert(entry.as_bytes().into());
            }
        }
        Ok(list)
    }

    /// Adds every entry of `other`.
    pub fn extend(&mut self, other: &KeyList) {
        self.exact.extend(other.exact.iter().cloned());
        self.blocks.extend(other.blocks.iter().copied());
    }

    /// The number of entries: distinct exact keys plus CIDR blocks (an IP
    /// address alone counts as a block of one address), for showing a
    /// list's size.
    pub fn len(&self) -> usize {
        self.exact.len() + self.blocks.len()
    }

    /// Whether the list has no entry.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.blocks.is_empty()
    }

    /// Whether `key` is in the list: an exact entry, or an IP address in one
    /// of its blocks.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.holds(&mut Probe::new(key))
    }

    /// [`KeyList::contains`] for a key that may be tested against several
    /// lists, read as an IP address once at most.
    pub(crate) fn holds(&self, probe: &mut Probe<'_>) -> bool {
        if self.exact.contains(probe.key) {
            return true;
        }
        if self.blocks.is_empty() {
            return false;
        }
        let Some(ip) = probe.ip() else {
            return false;
        };
        self.blocks.iter().any(|b| b.contains(ip))
    }
}

/// A key being tested against lists, with its address once read.
pub(crate) struct Probe<'k> {
    key: &'k [u8],
    ip: Option<Option<u128>>,
}

impl<'k> Probe<'k> {
    pub(crate) fn new(key: &'k [u8]) -> Self {
        Self { key, ip: None }
    }

    /// The key as an IP address, read on first use.
    fn ip(&mut self) -> Option<u128> {
        *self.ip.get_or_insert_with(|| address(self.key))
    }
}

/// The longest IP address in text form that `IpAddr` reads:
/// `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`.
const LONGEST_ADDRESS: usize = 45;

/// `key` as an IP address, if it is one. A key too long for an address, or
/// starting with anything but a hex digit or `:`, is refused before it is
/// parsed.
fn address(key: &[u8]) -> Option<u128> {
    let first = *key.first()?;
    if key.len() > LONGEST_ADDRESS || !(first.is_ascii_hexdigit() || first == b':') {
        return None;
    }
    let ip = std::str::from_utf8(key).ok()?.parse::<IpAddr>().ok()?;
    Some(bits(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_match_their_addresses_only() {
        let list = KeyList::parse("exempt", ["192.0.2.0/25", "2001:db8:1::/48", "0.0.0.0/0"]).unwrap();
        assert!(list.contains(b"192.0.2.127"));
        assert!(list.contains(b"2001:db8:1:ffff::1"));
        assert!(!list.contains(b"2001:db8:2::1"));
        // 0.0.0.0/0 matches every IPv4 address, mapped or not, and no IPv6.
        assert!(list.contains(b"203.0.113.9") && list.contains(b"::ffff:203.0.113.9"));
        assert!(!list.contains(b"2001:db9::1"));
        assert!(!list.contains(b"not an ip"));
        let single = KeyList::parse("deny", ["198.51.100.7"]).unwrap();
        assert!(single.contains(b"198.51.100.7") && !single.contains(b"198.51.100.8"));
        assert_eq!((list.len(), single.len()), (3, 1));
        let mut both = KeyList::parse("exempt", ["a", "b", "10.0.0.0/8"]).unwrap();
        both.extend(&KeyList::parse("exempt", ["b", "c"]).unwrap());
        // Exact keys are counted once, blocks as given.
        assert_eq!(both.len(), 4);
        assert_eq!(KeyList::new().len(), 0);
    }

    #[test]
    fn bad_entries_name_their_index_and_problem() {
        for (entries, reason) in [
            (vec!["a", ""], "must not be empty"),
            (vec!["10.0.0.0/33"], "from 0 to 32"),
            (vec!["10.0.0.1/8"], "bits set past its prefix"),
            (vec!["x/8"], "is not an IP address"),
            (vec!["::/129"], "from 0 to 128"),
        ] {
            let err = KeyList::parse("exempt", entries.iter()).unwrap_err();
            assert!(err.field().starts_with("exempt["), "{err}");
            assert!(err.reason().contains(reason), "{err}");
        }
    }

    proptest::proptest! {
        /// The quick refusal before parsing refuses only what `IpAddr`
        /// would refuse too: every address in text form (IPv4, IPv6 in its
        /// shortest and longest spellings, IPv4-mapped) is read as itself,
        /// and any other text as `IpAddr` reads it.
        #[test]
        fn keys_are_read_as_addresses_exactly_as_ipaddr_reads_them(
            v4 in proptest::prelude::any::<[u8; 4]>(),
            v6 in proptest::prelude::any::<[u16; 8]>(),
            text in "[0-9a-fA-F:.%x-]{0,48}|\\PC{0,50}",
        ) {
            let reference = |t: &str| t.parse::<IpAddr>().ok().map(bits);
            let v4 = std::net::Ipv4Addr::from(v4);
            let v6 = std::net::Ipv6Addr::from(v6);
            let long = v6.segments().map(|s| format!("{s:04x}")).join(":");
            let mapped = format!("ffff:ffff:ffff:ffff:ffff:ffff:{v4}");
            for t in [v4.to_string(), v6.to_string(), long, mapped, text] {
                proptest::prop_assert_eq!(address(t.as_bytes()), reference(&t), "{:?}", t);
            }
        }
    }
}
