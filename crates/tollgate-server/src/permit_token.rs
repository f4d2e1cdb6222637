//! The permits `POST /v1/acquire` and the holds `POST /v1/decide` with
//! `"settle": true` hand out, as the client holds them: an opaque token
//! naming what it is, the resource, the key and the identifier, signed
//! with the service's permit key (HMAC-SHA-256, the first 16 bytes), so
//! that `/v1/release`, `/v1/extend` and `/v1/settle` act only on what a
//! service holding that key issued, and a client cannot release another's
//! permit or settle another's hold by naming its key. Every replica of a
//! fleet that shares a store must hold the same key (`--permit-key-file`)
//! for one to act on another's tokens.
//!
//! The token is lowercase hexadecimal of: a version byte (1), its kind
//! (`P` a permit, `H` a hold), the resource's length (2 bytes) and name,
//! the key's length (4 bytes) and bytes, the identifier (16 bytes), all
//! big-endian, then the signature of all of that.

use ring::hmac;

/// The token's version.
const VERSION: u8 = 1;

/// The bytes of the signature kept in a token.
const TAG_BYTES: usize = 16;

/// The key permits are signed with.
pub(crate) struct PermitKey(hmac::Key);

/// What a token stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A permit of a concurrency limit (`/v1/acquire`).
    Permit,
    /// A hold of an estimate (`/v1/decide` with `"settle": true`).
    Hold,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Permit => b'P',
            Kind::Hold => b'H',
        }
    }
}

/// What a token names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Issued {
    /// The resource whose limiter holds the permit (empty: the default).
    pub(crate) resource: String,
    /// The caller's key.
    pub(crate) key: Vec<u8>,
    /// The permit's or the hold's identifier.
    pub(crate) id: u128,
}

impl PermitKey {
    /// A key of this process alone, drawn from the operating system's
    /// random source.
    pub(crate) fn random() -> Result<Self, getrandom::Error> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)?;
        Ok(Self::from_secret(&secret))
    }

    /// The key a secret shared by the fleet's replicas makes.
    pub(crate) fn from_secret(secret: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The token of the permit or hold (`kind`) `id` of `key` under
    /// `resource`.
    pub(crate) fn issue(&self, kind: Kind, resource: &str, key: &[u8], id: u128) -> String {
        let mut bytes = Vec::with_capacity(2 + 2 + resource.len() + 4 + key.len() + 16 + TAG_BYTES);
        bytes.push(VERSION);
        bytes.push(kind.byte());
        // A resource name and a key are far below these bounds (the
        // request body is at most 64 KiB).
        bytes.extend_from_slice(&(resource.len() as u16).to_be_bytes());
        bytes.extend_from_slice(resource.as_bytes());
        bytes.extend_from_slice(&(key.len() as u32).to_be_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&id.to_be_bytes());
        let tag = hmac::sign(&self.0, &bytes);
        bytes.extend_from_slice(&tag.as_ref()[..TAG_BYTES]);
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            text.push(char::from(DIGITS[usize::from(b >> 4)]));
            text.push(char::from(DIGITS[usize::from(b & 15)]));
        }
        text
    }

    /// What `token` names, when this key signed it as a `kind`;
    /// otherwise why not.
    pub(crate) fn read(&self, kind: Kind, token: &str) -> Result<Issued, &'static str> {
        let malformed = match kind {
            Kind::Permit => "is not a permit: give the `permit` string an acquire answered",
            Kind::Hold => "is not a hold: give the `hold` string a decision with \"settle\": true answered",
        };
        let bytes = hex(token).ok_or(malformed)?;
        let (signed, tag) = bytes
            .split_at_checked(bytes.len().checked_sub(TAG_BYTES).ok_or(malformed)?)
            .ok_or(malformed)?;
        let issued = fields(signed, kind).ok_or(malformed)?;
        let expected = hmac::sign(&self.0, signed);
        // Constant time: a forger learns nothing from how long it takes.
        if !constant_time_eq(&expected.as_ref()[..TAG_BYTES], tag) {
            return Err(
                "was not issued by this service, or was altered (replicas that share a store \
                        must share --permit-key-file for one to release another's permits)",
            );
        }
        Ok(issued)
    }
}

/// The bytes of lowercase or uppercase hexadecimal `text`.
fn hex(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    text.chunks_exact(2)
        .map(|pair| Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8))
        .collect()
}

/// The fields of a token's signed bytes, when it is of `kind`.
fn fields(signed: &[u8], kind: Kind) -> Option<Issued> {
    let [version, byte, rest @ ..] = signed else {
        return None;
    };
    if (*version, *byte) != (VERSION, kind.byte()) {
        return None;
    }
    let (len, rest) = rest.split_at_checked(2)?;
    let (resource, rest) = rest.split_at_checked(usize::from(u16::from_be_bytes(len.try_into().ok()?)))?;
    let (len, rest) = rest.split_at_checked(4)?;
    let (key, rest) = rest.split_at_checked(u32::from_be_bytes(len.try_into().ok()?) as usize)?;
    let id: [u8; 16] = rest.try_into().ok()?;
    Some(Issued {
        resource: String::from_utf8(resource.to_vec()).ok()?,
        key: key.to_vec(),
        id: u128::from_be_bytes(id),
    })
}

/// Whether `a` and `b` are equal, compared in time that does not depend on
/// where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_only_under_its_key_and_unaltered() {
        let key = PermitKey::from_secret(b"fleet secret");
        let token = key.issue(Kind::Permit, "exports", b"tenant-7", 42);
        let issued = key.read(Kind::Permit, &token).unwrap();
        assert_eq!(issued.resource, "exports");
        assert_eq!((issued.key.as_slice(), issued.id), (&b"tenant-7"[..], 42));
        let again = PermitKey::from_secret(b"fleet secret").read(Kind::Permit, &token);
        assert_eq!(again, Ok(issued));
        let other = PermitKey::from_secret(b"another secret");
        let refused = other.read(Kind::Permit, &token).unwrap_err();
        assert!(refused.contains("not issued by this service"));
        // Another key's name in place of this one's, the signature kept.
        let forged = token.replacen(&hex_of(b"tenant-7"), &hex_of(b"tenant-8"), 1);
        let refused = key.read(Kind::Permit, &forged).unwrap_err();
        assert!(refused.contains("not issued by this service"));
        for malformed in ["", "zz", "0", &token[..token.len() - 2], "01"] {
            let refused = key.read(Kind::Permit, malformed).unwrap_err();
            assert!(refused.starts_with("is not a permit"), "{malformed}");
        }
        // A permit is not a hold.
        let refused = key.read(Kind::Hold, &token).unwrap_err();
        assert!(refused.starts_with("is not a hold"));
    }

    fn hex_of(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
