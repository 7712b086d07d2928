//! The digest of a Multi Round-Trip `requestState`, computed as the value streams by. Its own
//! file because both halves need it and it needs neither: the scanner feeds it the raw bytes
//! of a line, the observer digests a state it holds whole, and the two must agree.

/// SHA-256 of a `requestState` string's value (its JSON escapes decoded), fed as its raw bytes
/// stream by. Only the digest is kept, in memory: the state itself is opaque server data the
/// observer must never write, and it may be of any length (an AEAD blob of every answer so
/// far). Decoding the escapes makes `"a\/b"` and `"a/b"` the same state, as they are to the
/// server, whichever JSON writer the client re-serialises the echoed value with.
#[derive(Debug, Clone)]
pub(super) struct StateDigest {
    hash: sha2::Sha256,
    /// The bytes of an escape sequence still arriving (up to two `\u` escapes of four hex
    /// digits each).
    esc: Vec<u8>,
}

impl StateDigest {
    pub(super) fn new() -> Self {
        use sha2::Digest;
        StateDigest {
            hash: sha2::Sha256::new(),
            esc: Vec::new(),
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) {
        use sha2::Digest;
        let mut plain = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if self.esc.is_empty() && b != b'\\' {
                continue;
            }
            if self.esc.is_empty() {
                self.hash.update(&bytes[plain..i]);
            }
            self.esc.push(b);
            self.decode();
            plain = i + 1;
        }
        if self.esc.is_empty() {
            self.hash.update(&bytes[plain..]);
        }
    }

    /// Digests the pending escape once it is complete. Anything malformed is digested as it
    /// is: such a line is not JSON, and no state compares equal to it by accident any more
    /// than by its raw bytes.
    fn decode(&mut self) {
        use sha2::Digest;
        let e = &self.esc;
        let hex4 = |at: usize| {
            std::str::from_utf8(&e[at..at + 4])
                .ok()
                .and_then(|h| u32::from_str_radix(h, 16).ok())
        };
        let c = match e.as_slice() {
            [b'\\'] | [b'\\', b'u', ..] if e.len() < 6 => return,
            [b'\\', b'u', ..] => match hex4(2) {
                Some(hi @ 0xD800..=0xDBFF) => {
                    if e.len() < 12 {
                        if e.len() > 6 && (e[6] != b'\\' || e.get(7).is_some_and(|&b| b != b'u')) {
                            None
                        } else {
                            return;
                        }
                    } else {
                        match (e[6], e[7], hex4(8)) {
                            (b'\\', b'u', Some(lo @ 0xDC00..=0xDFFF)) => {
                                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                            }
                            _ => None,
                        }
                    }
                }
                Some(cp) => char::from_u32(cp),
                None => None,
            },
            [b'\\', x] => match x {
                b'"' => Some('"'),
                b'\\' => Some('\\'),
                b'/' => Some('/'),
                b'b' => Some('\u{8}'),
                b'f' => Some('\u{c}'),
                b'n' => Some('\n'),
                b'r' => Some('\r'),
                b't' => Some('\t'),
                _ => None,
            },
            _ => None,
        };
        match c {
            Some(c) => self.hash.update(c.encode_utf8(&mut [0; 4]).as_bytes()),
            None => self.hash.update(&self.esc),
        }
        self.esc.clear();
    }

    pub(super) fn finish(&mut self) -> String {
        use sha2::Digest;
        let pending = std::mem::take(&mut self.esc);
        self.hash.update(&pending);
        let d = std::mem::replace(&mut self.hash, sha2::Sha256::new()).finalize();
        hex::encode(d)
    }
}
