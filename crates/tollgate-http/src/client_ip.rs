//! The client address behind trusted reverse proxies.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::forwarded;
use crate::key_error::{KeyError, KeyErrorKind};
use crate::request::RequestInfo;

/// The header a trusted proxy uses to pass on the client address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
    /// `X-Real-IP: client`, a single address set by the proxy.
    XRealIp,
}

impl ForwardedHeader {
    /// The header's name, in lower case.
    pub const fn name(self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
            ForwardedHeader::XRealIp => "x-real-ip",
        }
    }
}

/// A trusted-proxy entry that is neither a network (`10.0.0.0/8`,
/// `2001:db8::/32`) nor an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidNetwork(pub String);

impl std::fmt::Display for InvalidNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} is neither a network (a.b.c.d/n, x::/n) nor an address",
            self.0
        )
    }
}

impl std::error::Error for InvalidNetwork {}

/// Finds the client address of a request that may have come through
/// reverse proxies.
///
/// A forwarding header is read **only when the peer (the connection's other
/// end) is a trusted proxy**; by default no proxy is trusted, so the peer
/// address is the client address and a header sent by a client is ignored.
///
/// With a trusted peer, the hops of the header are walked from the right
/// (the nearest proxy appends last), skipping trusted proxies; the first
/// address that is not trusted is the client. When every hop is trusted the
/// leftmost one is taken; when the header is absent, the peer. A malformed
/// hop reached on this walk, an `unknown` or obfuscated `Forwarded` node, or
/// a repeated `X-Real-IP` makes the address unknown
/// ([`KeyErrorKind::Malformed`]), never a key; what happens then is up to
/// [`MissingKey`](crate::MissingKey).
///
/// Only name the header your proxies set or overwrite: a client can send
/// any header, and your proxy may pass a header it does not manage on
/// unchanged.
///
/// ```
/// use tollgate_http::{ClientIp, ForwardedHeader};
///
/// let client_ip = ClientIp::new()
///     .trust("10.0.0.0/8".parse().unwrap())
///     .trust("2001:db8:ffff::/48".parse().unwrap())
///     .header(ForwardedHeader::XForwardedFor);
/// assert!(client_ip.is_trusted("10.1.2.3".parse().unwrap()));
/// assert!(!client_ip.is_trusted("192.0.2.1".parse().unwrap()));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
    header: ForwardedHeader,
}

impl ClientIp {
    /// Trusts no proxy and reads `X-Forwarded-For` once one is trusted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the proxies in `net` (for one address, a /32 or /128:
    /// `IpNet::from(addr)`).
    pub fn trust(mut self, net: IpNet) -> Self {
        self.trusted.push(net);
        self
    }

    /// Also trusts every network in `nets`, given as text such as
    /// `10.0.0.0/8` or `192.0.2.7`.
    ///
    /// # Errors
    ///
    /// [`InvalidNetwork`] naming the first text that is neither a network
    /// nor an address.
    pub fn trust_all<'a>(mut self, nets: impl IntoIterator<Item = &'a str>) -> Result<Self, InvalidNetwork> {
        for net in nets {
            let parsed = net
                .trim()
                .parse::<IpNet>()
                .or_else(|_| net.trim().parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| InvalidNetwork(net.to_owned()))?;
            self.trusted.push(parsed);
        }
        Ok(self)
    }

    /// The header to read from trusted proxies (default `X-Forwarded-For`).
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The trusted networks.
    pub fn trusted(&self) -> &[IpNet] {
        &self.trusted
    }

    /// Whether `ip` is in a trusted network (IPv4-mapped IPv6 addresses are
    /// compared as IPv4).
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client address of `req`.
    ///
    /// # Errors
    ///
    /// [`KeyErrorKind::NoPeerAddress`] when the server did not record the
    /// peer; [`KeyErrorKind::Malformed`] when a trusted proxy's header cannot
    /// be read up to the client.
    pub fn resolve(&self, req: &RequestInfo<'_>) -> Result<IpAddr, KeyError> {
        let peer = req
            .peer_addr()
            .ok_or_else(|| KeyError::new(KeyErrorKind::NoPeerAddress, "the peer address is unknown"))?
            .ip()
            .to_canonical();
        if !self.is_trusted(peer) {
            return Ok(peer);
        }
        let lines = req.header_values(self.header.name());
        let hops = match self.header {
            ForwardedHeader::XRealIp => {
                if req.header(self.header.name()).is_none() {
                    return Ok(peer);
                }
                return forwarded::x_real_ip(lines)
                    .map(|ip| ip.to_canonical())
                    .ok_or_else(|| self.malformed());
            }
            ForwardedHeader::XForwardedFor => forwarded::x_forwarded_for(lines),
            ForwardedHeader::Forwarded => forwarded::forwarded(lines),
        };
        self.walk(peer, &hops)
    }

    /// Walks `hops` from the right, skipping trusted proxies.
    fn walk(&self, peer: IpAddr, hops: &[forwarded::Hop]) -> Result<IpAddr, KeyError> {
        let mut leftmost = peer;
        for hop in hops.iter().rev() {
            let ip = hop.ok_or_else(|| self.malformed())?.to_canonical();
            if !self.is_trusted(ip) {
                return Ok(ip);
            }
            leftmost = ip;
        }
        Ok(leftmost)
    }

    fn malformed(&self) -> KeyError {
        KeyError::new(
            KeyErrorKind::Malformed,
            format!(
                "the {} header from a trusted proxy is malformed",
                self.header.name()
            ),
        )
    }
}

#[cfg(all(test, feature = "tower"))]
mod tests {
    use super::*;
    use crate::PeerAddr;

    fn resolve(client_ip: &ClientIp, peer: &str, headers: &[(&str, &str)]) -> Result<String, KeyErrorKind> {
        let mut req = http::Request::builder();
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let mut req = req.body(()).unwrap();
        req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
        let (parts, ()) = req.into_parts();
        client_ip
            .resolve(&RequestInfo::from_http(&parts))
            .map(|ip| ip.to_string())
            .map_err(|e| e.kind())
    }

    fn proxies() -> ClientIp {
        ClientIp::new()
            .trust_all(["10.0.0.0/8", "2001:db8:ffff::/48"])
            .unwrap()
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        let xff = [("x-forwarded-for", "198.51.100.1")];
        assert_eq!(
            resolve(&ClientIp::new(), "192.0.2.1:5000", &xff),
            Ok("192.0.2.1".into())
        );
        assert_eq!(
            resolve(&proxies(), "192.0.2.1:5000", &xff),
            Ok("192.0.2.1".into())
        );
        let garbage = [("x-forwarded-for", "not an address")];
        assert_eq!(
            resolve(&proxies(), "192.0.2.1:5000", &garbage),
            Ok("192.0.2.1".into())
        );
    }

    #[test]
    fn a_trusted_peer_passes_on_the_first_untrusted_hop_from_the_right() {
        let p = proxies();
        let one = [("x-forwarded-for", "198.51.100.1")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &one), Ok("198.51.100.1".into()));
        // The client prepended a spoofed address; the proxies appended the rest.
        let hops = [("x-forwarded-for", "6.6.6.6, 198.51.100.1, 10.1.1.1, 10.2.2.2")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &hops), Ok("198.51.100.1".into()));
        let lines = [
            ("x-forwarded-for", "6.6.6.6, 198.51.100.1"),
            ("x-forwarded-for", "10.1.1.1"),
        ];
        assert_eq!(resolve(&p, "10.0.0.1:80", &lines), Ok("198.51.100.1".into()));
        let v6 = [("x-forwarded-for", "[2001:db8:1::5]:443, 2001:db8:ffff::1")];
        assert_eq!(
            resolve(&p, "[2001:db8:ffff::2]:80", &v6),
            Ok("2001:db8:1::5".into())
        );
    }

    #[test]
    fn all_trusted_hops_give_the_leftmost_and_no_header_gives_the_peer() {
        let p = proxies();
        let hops = [("x-forwarded-for", "10.9.9.9, 10.1.1.1")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &hops), Ok("10.9.9.9".into()));
        assert_eq!(resolve(&p, "10.0.0.1:80", &[]), Ok("10.0.0.1".into()));
    }

    #[test]
    fn a_malformed_hop_on_the_walk_is_an_error_but_one_beyond_the_client_is_not() {
        let p = proxies();
        for bad in [
            "",
            "unknown",
            "198.51.100.1, garbage",
            "198.51.100.1,,10.1.1.1",
            "1.2.3.4.5",
        ] {
            let h = [("x-forwarded-for", bad)];
            assert_eq!(
                resolve(&p, "10.0.0.1:80", &h),
                Err(KeyErrorKind::Malformed),
                "{bad:?}"
            );
        }
        let beyond = [("x-forwarded-for", "garbage, 198.51.100.1, 10.1.1.1")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &beyond), Ok("198.51.100.1".into()));
    }

    #[test]
    fn forwarded_and_x_real_ip_are_read_when_chosen() {
        let p = proxies().header(ForwardedHeader::Forwarded);
        let fwd = [(
            "forwarded",
            r#"for=198.51.100.1;proto=https, for="[2001:db8:ffff::9]:80""#,
        )];
        assert_eq!(resolve(&p, "10.0.0.1:80", &fwd), Ok("198.51.100.1".into()));
        let hidden = [("forwarded", "for=_proxy, for=10.1.1.1")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &hidden), Err(KeyErrorKind::Malformed));
        // The other headers are not read.
        let xff = [("x-forwarded-for", "198.51.100.7")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &xff), Ok("10.0.0.1".into()));

        let p = proxies().header(ForwardedHeader::XRealIp);
        let real = [("x-real-ip", "198.51.100.2")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &real), Ok("198.51.100.2".into()));
        let twice = [("x-real-ip", "198.51.100.2"), ("x-real-ip", "198.51.100.3")];
        assert_eq!(resolve(&p, "10.0.0.1:80", &twice), Err(KeyErrorKind::Malformed));
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_networks() {
        let hops = [("x-forwarded-for", "::ffff:198.51.100.1")];
        assert_eq!(
            resolve(&proxies(), "[::ffff:10.0.0.1]:80", &hops),
            Ok("198.51.100.1".into())
        );
    }

    #[test]
    fn trust_all_names_the_bad_entry() {
        assert_eq!(
            ClientIp::new()
                .trust_all(["10.0.0.0/8", "10.0.0.0/33"])
                .unwrap_err(),
            InvalidNetwork("10.0.0.0/33".into())
        );
        assert!(ClientIp::new().trust_all(["192.0.2.7", " ::1 "]).is_ok());
    }
}
