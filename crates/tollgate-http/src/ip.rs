//! Client addresses as rate-limit keys: IPv6 addresses grouped by prefix.

use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// How addresses are grouped into keys.
///
/// One IPv6 host usually owns a whole /64 and can pick any address in it, so
/// limiting single IPv6 addresses limits nothing. By default IPv6 addresses
/// are grouped by their /64 prefix and IPv4 addresses stand alone (/32).
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) count as IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpGrouping {
    v4_prefix: u8,
    v6_prefix: u8,
}

impl Default for IpGrouping {
    fn default() -> Self {
        Self {
            v4_prefix: 32,
            v6_prefix: 64,
        }
    }
}

impl IpGrouping {
    /// The default grouping: IPv4 /32, IPv6 /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups IPv4 addresses by their first `prefix` bits (at most 32).
    ///
    /// # Panics
    ///
    /// When `prefix` is greater than 32.
    pub fn ipv4_prefix(mut self, prefix: u8) -> Self {
        assert!(prefix <= 32, "an IPv4 prefix is at most 32 bits, got {prefix}");
        self.v4_prefix = prefix;
        self
    }

    /// Groups IPv6 addresses by their first `prefix` bits (at most 128;
    /// 128 keys every address on its own).
    ///
    /// # Panics
    ///
    /// When `prefix` is greater than 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        assert!(prefix <= 128, "an IPv6 prefix is at most 128 bits, got {prefix}");
        self.v6_prefix = prefix;
        self
    }

    /// The key for `ip`: the address itself (`203.0.113.7`) when its prefix
    /// is the full length, otherwise its network (`2001:db8:1:2::/64`).
    pub fn key(&self, ip: IpAddr) -> IpKey {
        let mut key = IpKey::default();
        // Writing to an in-memory buffer sized for the longest form cannot fail.
        let _ = match ip.to_canonical() {
            IpAddr::V4(v4) => write_v4(&mut key, v4, self.v4_prefix),
            IpAddr::V6(v6) => write_v6(&mut key, v6, self.v6_prefix),
        };
        key
    }
}

fn write_v4(out: &mut IpKey, ip: Ipv4Addr, prefix: u8) -> std::fmt::Result {
    if prefix == 32 {
        out.push_dotted(ip.octets());
        return Ok(());
    }
    let net = Ipv4Net::new(ip, prefix).map_err(|_| std::fmt::Error)?.trunc();
    write!(out, "{net}")
}

/// The decimal digits of every octet followed by a dot, left-aligned, and
/// how many bytes that is (digits and dot).
const OCTETS: [([u8; 4], u8); 256] = {
    let mut table = [([0u8; 4], 0u8); 256];
    let mut n = 0;
    while n < 256 {
        let (h, t, o) = ((n / 100) as u8, (n / 10 % 10) as u8, (n % 10) as u8);
        table[n] = if n >= 100 {
            ([b'0' + h, b'0' + t, b'0' + o, b'.'], 4)
        } else if n >= 10 {
            ([b'0' + t, b'0' + o, b'.', 0], 3)
        } else {
            ([b'0' + o, b'.', 0, 0], 2)
        };
        n += 1;
    }
    table
};

fn write_v6(out: &mut IpKey, ip: Ipv6Addr, prefix: u8) -> std::fmt::Result {
    if prefix == 128 {
        return write!(out, "{ip}");
    }
    let net = Ipv6Net::new(ip, prefix).map_err(|_| std::fmt::Error)?.trunc();
    write!(out, "{net}")
}

/// The longest key: an IPv6 address in its longest text form (45 bytes) and
/// a prefix length.
const IP_KEY_CAPACITY: usize = 52;

/// An address key, formatted without allocating.
#[derive(Clone, Copy)]
pub struct IpKey {
    buf: [u8; IP_KEY_CAPACITY],
    len: u8,
}

impl Default for IpKey {
    fn default() -> Self {
        Self {
            buf: [0; IP_KEY_CAPACITY],
            len: 0,
        }
    }
}

impl IpKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII and whole UTF-8 strings are written to the buffer.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The key's bytes (ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl IpKey {
    /// Writes `octets` in dotted decimal to an empty key: the common case,
    /// many times faster than going through `Display`. Each octet's digits
    /// and dot are copied as one 4-byte word from a table; the last dot is
    /// then dropped.
    fn push_dotted(&mut self, octets: [u8; 4]) {
        debug_assert_eq!(self.len, 0);
        let mut len = 0;
        for octet in octets {
            let (bytes, count) = OCTETS[usize::from(octet)];
            // At most 4 × 4 bytes: within the capacity.
            self.buf[len..len + 4].copy_from_slice(&bytes);
            len += usize::from(count);
        }
        self.len = (len - 1) as u8;
    }
}

impl std::fmt::Debug for IpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Write for IpKey {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let start = usize::from(self.len);
        let end = start + s.len();
        if end > IP_KEY_CAPACITY {
            return Err(std::fmt::Error);
        }
        self.buf[start..end].copy_from_slice(s.as_bytes());
        self.len = end as u8;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(grouping: IpGrouping, ip: &str) -> String {
        grouping.key(ip.parse().unwrap()).as_str().to_owned()
    }

    #[test]
    fn ipv4_stands_alone_by_default_and_groups_on_request() {
        let g = IpGrouping::new();
        assert_eq!(key(g, "203.0.113.7"), "203.0.113.7");
        for ip in ["0.0.0.0", "255.255.255.255", "10.9.99.100", "1.20.109.250"] {
            assert_eq!(key(g, ip), ip);
        }
        assert_eq!(key(g.ipv4_prefix(24), "203.0.113.7"), "203.0.113.0/24");
        assert_eq!(key(g.ipv4_prefix(0), "203.0.113.7"), "0.0.0.0/0");
    }

    #[test]
    fn every_octet_is_written_as_display_writes_it() {
        let g = IpGrouping::new();
        for n in 0..=255u8 {
            let ip = format!("{n}.{}.{n}.{}", 255 - n, n / 2);
            assert_eq!(key(g, &ip), ip);
        }
    }

    #[test]
    fn ipv6_is_grouped_by_its_64_bit_prefix() {
        let g = IpGrouping::new();
        assert_eq!(key(g, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(key(g, "2001:db8:1:2:bbbb::9"), "2001:db8:1:2::/64");
        assert_ne!(key(g, "2001:db8:1:3::1"), key(g, "2001:db8:1:2::1"));
        assert_eq!(key(g.ipv6_prefix(128), "2001:db8::1"), "2001:db8::1");
        assert_eq!(key(g.ipv6_prefix(48), "2001:db8:1:2::1"), "2001:db8:1::/48");
    }

    #[test]
    fn the_longest_address_fits() {
        let g = IpGrouping::new().ipv6_prefix(127);
        let k = key(g, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe");
        assert_eq!(k, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127");
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        assert_eq!(key(IpGrouping::new(), "::ffff:192.0.2.1"), "192.0.2.1");
    }

    #[test]
    #[should_panic(expected = "at most 128")]
    fn an_impossible_prefix_is_refused() {
        let _ = IpGrouping::new().ipv6_prefix(129);
    }
}
