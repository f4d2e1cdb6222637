//! Why no rate-limit key could be taken from a request.

use std::borrow::Cow;

/// Why no key could be taken from a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyErrorKind {
    /// The request does not carry the key (e.g. no API key header).
    Missing,
    /// A trusted proxy's forwarding header cannot be read.
    Malformed,
    /// The server did not record the peer address (for axum, serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`).
    NoPeerAddress,
}

/// Why no key could be taken from a request, with a message for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError {
    kind: KeyErrorKind,
    message: Cow<'static, str>,
}

impl KeyError {
    /// An error of `kind` with a short message.
    pub fn new(kind: KeyErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> KeyErrorKind {
        self.kind
    }

    /// A short description, safe to show to the client.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KeyError {}
