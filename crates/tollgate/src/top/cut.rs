//! Long keys as the top keys record them: keys come from clients, so a key
//! longer than [`TopKeys::MAX_KEY_BYTES`](super::TopKeys::MAX_KEY_BYTES)
//! is recorded by its start, and keys sharing that start count together.

use super::TopKeys;

/// `key` as recorded, and whether it was cut: its first
/// [`TopKeys::MAX_KEY_BYTES`] bytes or fewer, ending before a UTF-8
/// continuation byte so that a text key is not cut inside a character.
pub(crate) fn recorded(key: &[u8]) -> (&[u8], bool) {
    if key.len() <= TopKeys::MAX_KEY_BYTES {
        return (key, false);
    }
    let mut end = TopKeys::MAX_KEY_BYTES;
    // A character is at most 4 bytes, so at most 3 continuation bytes
    // start the rest.
    for _ in 0..3 {
        if key[end] & 0xC0 != 0x80 {
            break;
        }
        end -= 1;
    }
    (&key[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_whole() {
        let key = vec![b'a'; TopKeys::MAX_KEY_BYTES];
        assert_eq!(recorded(&key), (&key[..], false));
        assert_eq!(recorded(b""), (&b""[..], false));
    }

    #[test]
    fn long_keys_are_cut_between_characters() {
        let long = "é".repeat(TopKeys::MAX_KEY_BYTES);
        let (start, cut) = recorded(long.as_bytes());
        assert!(cut);
        assert_eq!(start.len(), TopKeys::MAX_KEY_BYTES);
        assert!(std::str::from_utf8(start).is_ok());
        let odd = format!("a{long}");
        let (start, cut) = recorded(odd.as_bytes());
        assert!(cut);
        assert_eq!(start.len(), TopKeys::MAX_KEY_BYTES - 1);
        assert!(std::str::from_utf8(start).is_ok());
        let binary = vec![0x80; 10 * TopKeys::MAX_KEY_BYTES];
        assert_eq!(recorded(&binary).0.len(), TopKeys::MAX_KEY_BYTES - 3);
    }
}
