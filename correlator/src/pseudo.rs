//! Keyed pseudonymization of raw ids (docs/design.md §7).
//!
//! Every id that leaves the process (stream, request, response, call, item, thread, interval
//! and the hints) is replaced by HMAC-SHA256(key, raw id), truncated to 16 bytes and written
//! as hex. The same raw id always maps to the same pseudonym under one key, so joins still
//! work; without the key the raw id cannot be recovered or confirmed. Which fields of an event
//! are ids is `sanitize::Scrub`'s business.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of a key file's content, in bytes (after hex decoding).
pub const PSEUDONYM_KEY_LEN: usize = 32;

#[derive(Clone)]
pub struct Pseudonymizer {
    mac: Hmac<Sha256>,
}

impl Pseudonymizer {
    pub fn new(key: &[u8; PSEUDONYM_KEY_LEN]) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
        Pseudonymizer { mac }
    }

    /// Parses a key file's text: 64 hex digits, surrounding white space ignored.
    pub fn key_from_hex(text: &str) -> Result<[u8; PSEUDONYM_KEY_LEN], String> {
        let t = text.trim();
        let bytes = hex::decode(t).map_err(|e| format!("the key must be 64 hex digits: {e}"))?;
        bytes.try_into().map_err(|b: Vec<u8>| {
            format!("the key must be 32 bytes (64 hex digits), got {}", b.len())
        })
    }

    /// The pseudonym of one raw id.
    pub fn id(&self, raw: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(raw.as_bytes());
        let digest = mac.finalize().into_bytes();
        hex::encode(&digest[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_id_same_pseudonym_and_keys_differ() {
        let a = Pseudonymizer::new(&[1; PSEUDONYM_KEY_LEN]);
        let b = Pseudonymizer::new(&[2; PSEUDONYM_KEY_LEN]);
        assert_eq!(a.id("toolu_01"), a.id("toolu_01"));
        assert_ne!(a.id("toolu_01"), a.id("toolu_02"));
        assert_ne!(a.id("toolu_01"), b.id("toolu_01"));
        assert_eq!(a.id("x").len(), 32);
        assert!(!a.id("toolu_01").contains("toolu"));
    }

    #[test]
    fn key_files_are_checked() {
        assert!(Pseudonymizer::key_from_hex(&"ab".repeat(32)).is_ok());
        assert!(Pseudonymizer::key_from_hex("abc").is_err());
        assert!(Pseudonymizer::key_from_hex(&"zz".repeat(32)).is_err());
        assert!(Pseudonymizer::key_from_hex(&"ab".repeat(16))
            .unwrap_err()
            .contains("32 bytes"));
    }
}
