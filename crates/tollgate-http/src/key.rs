//! Whom a limit applies to: the key taken from each request.

use std::borrow::Cow;
use std::sync::Arc;

use crate::client_ip::ClientIp;
use crate::ip::{IpGrouping, IpKey};
use crate::key_error::{KeyError, KeyErrorKind};
use crate::request::{assert_header_name, RequestInfo};

type KeyFn = dyn Fn(&RequestInfo<'_>) -> Option<String> + Send + Sync;

/// Takes the rate-limit key from a request.
///
/// ```
/// use tollgate_http::{ClientIp, KeyExtractor};
///
/// let by_peer = KeyExtractor::peer_ip();
/// let by_client = KeyExtractor::client_ip(ClientIp::new().trust("10.0.0.0/8".parse().unwrap()));
/// let by_api_key = KeyExtractor::header("x-api-key");
/// let by_tenant = KeyExtractor::custom(|req| req.header_str("x-tenant").map(str::to_owned));
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    PeerIp,
    ClientIp(Arc<ClientIp>),
    Header(Box<str>),
    Path,
    Custom(Arc<KeyFn>),
}

impl std::fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::PeerIp => f.write_str("KeyExtractor::PeerIp"),
            Kind::ClientIp(c) => f.debug_tuple("KeyExtractor::ClientIp").field(c).finish(),
            Kind::Header(h) => f.debug_tuple("KeyExtractor::Header").field(h).finish(),
            Kind::Path => f.write_str("KeyExtractor::Path"),
            Kind::Custom(_) => f.write_str("KeyExtractor::Custom(..)"),
        }
    }
}

impl Default for KeyExtractor {
    /// [`KeyExtractor::peer_ip`].
    fn default() -> Self {
        Self::peer_ip()
    }
}

impl KeyExtractor {
    /// The address of the connection's other end, grouped by
    /// [`IpGrouping`] (the default extractor).
    pub fn peer_ip() -> Self {
        Self { kind: Kind::PeerIp }
    }

    /// The client address behind trusted proxies; see [`ClientIp`].
    pub fn client_ip(client_ip: ClientIp) -> Self {
        Self {
            kind: Kind::ClientIp(Arc::new(client_ip)),
        }
    }

    /// The value of request header `name`, e.g. an API key. An absent or
    /// empty header is a missing key.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name.
    pub fn header(name: &str) -> Self {
        assert_header_name(name);
        Self {
            kind: Kind::Header(name.to_ascii_lowercase().into_boxed_str()),
        }
    }

    /// The request path (without the query).
    pub fn path() -> Self {
        Self { kind: Kind::Path }
    }

    /// Any function of the request; `None` is a missing key.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&RequestInfo<'_>) -> Option<String> + Send + Sync + 'static,
    {
        Self {
            kind: Kind::Custom(Arc::new(f)),
        }
    }

    /// The key of `req`.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] saying why there is no key.
    pub fn extract<'a>(&self, req: &RequestInfo<'a>, grouping: &IpGrouping) -> Result<Key<'a>, KeyError> {
        match &self.kind {
            Kind::PeerIp => peer_key(req, grouping),
            Kind::ClientIp(client_ip) => Ok(Key::ip(grouping.key(client_ip.resolve(req)?))),
            Kind::Header(name) => match req.header(name) {
                Some(value) if !value.is_empty() => Ok(Key::borrowed(value)),
                _ => Err(KeyError::new(
                    KeyErrorKind::Missing,
                    format!("the {name} header is required"),
                )),
            },
            Kind::Path => Ok(Key::borrowed(req.path().as_bytes())),
            Kind::Custom(f) => f(req)
                .map(|k| Key::owned(k.into_bytes()))
                .ok_or_else(|| KeyError::new(KeyErrorKind::Missing, "the request has no rate-limit key")),
        }
    }
}

/// The peer address as a key.
pub(crate) fn peer_key<'a>(req: &RequestInfo<'a>, grouping: &IpGrouping) -> Result<Key<'a>, KeyError> {
    let peer = req
        .peer_addr()
        .ok_or_else(|| KeyError::new(KeyErrorKind::NoPeerAddress, "the peer address is unknown"))?;
    Ok(Key::ip(grouping.key(peer.ip())))
}

/// A rate-limit key taken from a request; formatted addresses and borrowed
/// header values need no allocation.
#[derive(Clone, Debug)]
pub struct Key<'a> {
    repr: Repr<'a>,
}

#[derive(Clone, Debug)]
enum Repr<'a> {
    Ip(IpKey),
    Bytes(Cow<'a, [u8]>),
}

impl<'a> Key<'a> {
    fn ip(key: IpKey) -> Self {
        Self { repr: Repr::Ip(key) }
    }

    fn borrowed(bytes: &'a [u8]) -> Self {
        Self {
            repr: Repr::Bytes(Cow::Borrowed(bytes)),
        }
    }

    fn owned(bytes: Vec<u8>) -> Self {
        Self {
            repr: Repr::Bytes(Cow::Owned(bytes)),
        }
    }

    /// The key's bytes, as handed to the limiter.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Ip(ip) => ip.as_bytes(),
            Repr::Bytes(bytes) => bytes,
        }
    }
}

/// What to do with a request whose key cannot be taken (an absent API key
/// header, a malformed forwarding header from a trusted proxy, a closure
/// returning `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissingKey {
    /// Answer without calling the service: 400 with a short body, or 500 if
    /// the server did not record the peer address (see
    /// [`RateLimit::on_key_error`](crate::RateLimit::on_key_error)). The
    /// default.
    #[default]
    Reject,
    /// Limit the request by its peer address instead.
    PeerIp,
}
