//! The line scanner: a streaming JSON lexer that digests one line, fed in pieces of any
//! size, into its skeleton. It never builds a tree of the line and keeps only what the
//! observer reads, so memory is bounded by the skeleton, not by the line; anything that is not
//! JSON, not UTF-8, too deep or too big digests to nothing rather than to a guess.

use super::state_digest::StateDigest;

/// Longest string (raw, between its quotes) or number kept in a skeleton. Longer ones become
/// `null`: an id, method, tool name or hint of that size is not one we could report anyway.
pub(super) const SCALAR_CAP: usize = 4096;
/// Longest object key we look at. Longer keys drop their member.
const KEY_CAP: usize = 256;
/// Largest skeleton. Past it the line is given up (a message with thousands of scalar members
/// where we keep members is not an MCP message we need).
const SKELETON_CAP: usize = 64 * 1024;
/// Deepest nesting followed (serde_json's own limit). Deeper lines are given up, so that a
/// line of a million `[` costs no more memory than any other.
pub(super) const MAX_DEPTH: usize = 128;

/// What role a container plays, which decides which of its members the skeleton keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A top-level array (a JSON-RPC batch): its objects are messages.
    Batch,
    /// A message: keeps scalars, and `params`, `result`, `error` as containers.
    Message,
    /// `params`: keeps scalars and `_meta`.
    Params,
    /// `result`, `error`, `params._meta`: keep scalars only.
    Scalars,
    /// `params.inputResponses`: written as an empty container, so that its presence (a
    /// Multi Round-Trip retry) is seen while the client's answers never are.
    Opaque,
    /// Dropped subtree: lexed, never written.
    Dropped,
}

impl Role {
    /// The role of a container value found in this role under `key` (`None`: in an array).
    fn child(self, key: Option<&[u8]>) -> Role {
        match (self, key) {
            (Role::Batch, None) => Role::Message,
            (Role::Message, Some(b"params")) => Role::Params,
            (Role::Message, Some(b"result")) | (Role::Message, Some(b"error")) => Role::Scalars,
            (Role::Params, Some(b"_meta")) => Role::Scalars,
            (Role::Params, Some(b"inputResponses")) => Role::Opaque,
            _ => Role::Dropped,
        }
    }

    fn keeps_scalars(self) -> bool {
        !matches!(self, Role::Dropped | Role::Opaque)
    }

    /// Whether the keys of an object in this role are read (to decide about their values).
    fn reads_keys(self) -> bool {
        self.keeps_scalars()
    }
}

#[derive(Debug)]
pub(super) struct Frame {
    is_object: bool,
    role: Role,
    /// Whether a member has been written into this (kept) container yet.
    wrote_member: bool,
    /// The current member's key, when it is to be kept (objects only).
    key: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Expecting a value (after `:`, after `[` or `,` in an array, or at the top).
    Value,
    /// Just after `{` or `,` in an object: expecting a key (or `}` right after `{`).
    Key { first: bool },
    /// Just after `[`: a value or `]`.
    ArrayFirst,
    /// After a key: expecting `:`.
    Colon,
    /// After a complete value: expecting `,` or a closing bracket.
    After,
    /// Inside a string.
    Str { what: StrKind, escape: bool },
    /// Inside a number or `true` / `false` / `null`.
    Literal { keep: bool },
    /// The top-level value is complete; only whitespace may follow.
    Done,
    /// Not JSON, not UTF-8, or too big: the line digests to nothing.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrKind {
    /// A key of a kept object: read, to decide about its value.
    Key,
    /// A key inside a dropped subtree: skipped.
    DroppedKey,
    Kept,
    Dropped,
    /// A `requestState` string: never kept, only digested as it streams by (any length), and
    /// the digest is what the skeleton holds.
    State,
}

/// Digests one line at a time into a skeleton. Feed pieces with [`push`](Self::push) and end
/// the line with [`finish`](Self::finish); the scanner is then ready for the next line.
#[derive(Debug)]
pub struct LineScanner {
    out: Vec<u8>,
    pub(super) stack: Vec<Frame>,
    lex: Lex,
    /// Raw bytes of the key, string or literal being read, when it may be kept.
    tok: Vec<u8>,
    tok_overflow: bool,
    /// Incomplete UTF-8 sequence at the end of the last piece.
    utf8_carry: Vec<u8>,
    empty: bool,
    /// The digest of the `requestState` string being read.
    state: StateDigest,
}

impl Default for LineScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl LineScanner {
    pub fn new() -> Self {
        LineScanner {
            out: Vec::new(),
            stack: Vec::new(),
            lex: Lex::Value,
            tok: Vec::new(),
            tok_overflow: false,
            utf8_carry: Vec::new(),
            empty: true,
            state: StateDigest::new(),
        }
    }

    /// Feeds the next piece of the current line (without its `\n`).
    pub fn push(&mut self, piece: &[u8]) {
        if piece.is_empty() || self.lex == Lex::Failed {
            return;
        }
        self.empty = false;
        if !self.utf8_ok(piece) {
            self.fail();
            return;
        }
        let mut i = 0;
        while i < piece.len() && self.lex != Lex::Failed {
            i = self.step(piece, i);
        }
    }

    /// Ends the line: the skeleton of a complete JSON value, or `None` for anything else
    /// (empty, not JSON, not UTF-8, truncated, too big). Resets the scanner.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        if let Lex::Literal { keep } = self.lex {
            self.end_literal(keep);
        }
        let ok = !self.empty
            && self.lex == Lex::Done
            && self.utf8_carry.is_empty()
            && self.out.len() <= SKELETON_CAP;
        let out = std::mem::take(&mut self.out);
        *self = LineScanner::new();
        ok.then_some(out)
    }

    fn fail(&mut self) {
        self.lex = Lex::Failed;
        self.out.clear();
        self.stack.clear();
        self.tok.clear();
    }

    /// Checks the piece is UTF-8, carrying an incomplete trailing sequence to the next piece.
    fn utf8_ok(&mut self, piece: &[u8]) -> bool {
        let mut rest = piece;
        if !self.utf8_carry.is_empty() {
            // Complete the carried sequence with at most 3 more bytes.
            let need = 4 - self.utf8_carry.len();
            let take = need.min(rest.len());
            let mut joined = std::mem::take(&mut self.utf8_carry);
            joined.extend_from_slice(&rest[..take]);
            match std::str::from_utf8(&joined) {
                Ok(_) => rest = &rest[take..],
                Err(e) if e.valid_up_to() > 0 => {
                    // The carried sequence completed; re-check the bytes after it in place.
                    let used = e.valid_up_to() - (joined.len() - take);
                    rest = &rest[used..];
                }
                Err(e) if e.error_len().is_none() => {
                    self.utf8_carry = joined;
                    return true;
                }
                Err(_) => return false,
            }
        }
        match std::str::from_utf8(rest) {
            Ok(_) => true,
            Err(e) if e.error_len().is_none() => {
                self.utf8_carry = rest[e.valid_up_to()..].to_vec();
                true
            }
            Err(_) => false,
        }
    }

    fn role(&self) -> Role {
        self.stack.last().map_or(Role::Batch, |f| f.role)
    }

    /// Whether the value about to start is written, and with what role if it is a container.
    fn value_role(&self) -> (bool, Role) {
        match self.stack.last() {
            // The top-level value: an object is a message, an array a batch.
            None => (true, Role::Batch),
            Some(f) if f.role == Role::Dropped => (false, Role::Dropped),
            Some(f) if f.is_object => match &f.key {
                Some(k) => (true, f.role.child(Some(k))),
                None => (false, Role::Dropped),
            },
            Some(f) => (true, f.role.child(None)),
        }
    }

    /// Writes the `,` and key that precede a kept value in its container.
    fn open_member(&mut self) {
        let Some(f) = self.stack.last_mut() else {
            return;
        };
        if f.wrote_member {
            self.out.push(b',');
        }
        f.wrote_member = true;
        if f.is_object {
            if let Some(k) = &f.key {
                self.out.push(b'"');
                self.out.extend_from_slice(k);
                self.out.extend_from_slice(b"\":");
            }
        }
    }

    fn after_value(&mut self) {
        self.lex = if self.stack.is_empty() {
            Lex::Done
        } else {
            Lex::After
        };
        if self.out.len() > SKELETON_CAP {
            self.fail();
        }
    }

    fn end_literal(&mut self, keep: bool) {
        if keep {
            if self.tok_overflow || !valid_literal(&self.tok) {
                if !self.tok_overflow {
                    // Something like `tru` or `1x`: not JSON at all.
                    self.fail();
                    return;
                }
                self.out.extend_from_slice(b"null");
            } else {
                self.out.extend_from_slice(&self.tok);
            }
        }
        self.tok.clear();
        self.tok_overflow = false;
        self.after_value();
    }

    /// Consumes bytes from `piece[i..]` in the current state; returns the next index.
    fn step(&mut self, piece: &[u8], i: usize) -> usize {
        let b = piece[i];
        match self.lex {
            Lex::Failed => piece.len(),
            Lex::Str { what, escape } => self.string_bytes(piece, i, what, escape),
            Lex::Literal { keep } => {
                if matches!(b, b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'.' | b'+' | b'-') {
                    if keep {
                        if self.tok.len() < 64 {
                            self.tok.push(b);
                        } else {
                            self.tok_overflow = true;
                        }
                    }
                    i + 1
                } else {
                    self.end_literal(keep);
                    i // re-read this byte in the new state
                }
            }
            _ if matches!(b, b' ' | b'\t' | b'\r' | b'\n') => i + 1,
            Lex::Done => {
                self.fail();
                piece.len()
            }
            Lex::Colon => {
                if b == b':' {
                    self.lex = Lex::Value;
                } else {
                    self.fail();
                }
                i + 1
            }
            Lex::Key { first } => {
                match b {
                    b'"' => {
                        self.tok.clear();
                        self.tok_overflow = false;
                        let dropped = !self.role().reads_keys();
                        let what = if dropped {
                            StrKind::DroppedKey
                        } else {
                            StrKind::Key
                        };
                        self.lex = Lex::Str {
                            what,
                            escape: false,
                        };
                    }
                    b'}' if first => self.close(true),
                    _ => self.fail(),
                }
                i + 1
            }
            Lex::After => {
                let is_object = self.stack.last().is_some_and(|f| f.is_object);
                match (b, is_object) {
                    (b',', true) => self.lex = Lex::Key { first: false },
                    (b',', false) => self.lex = Lex::Value,
                    (b'}', true) => self.close(true),
                    (b']', false) => self.close(false),
                    _ => self.fail(),
                }
                i + 1
            }
            Lex::ArrayFirst if b == b']' => {
                self.close(false);
                i + 1
            }
            Lex::Value | Lex::ArrayFirst => {
                let (keep, role) = self.value_role();
                let keep_scalar = keep && self.role_for_scalars();
                match b {
                    b'{' | b'[' if self.stack.len() >= MAX_DEPTH => self.fail(),
                    b'{' | b'[' => {
                        let kept = keep && role != Role::Dropped;
                        if kept {
                            self.open_member();
                            self.out.push(b);
                        }
                        let role = if kept { role } else { Role::Dropped };
                        let role = if b == b'{' && self.stack.is_empty() {
                            Role::Message
                        } else {
                            role
                        };
                        self.stack.push(Frame {
                            is_object: b == b'{',
                            role,
                            wrote_member: false,
                            key: None,
                        });
                        self.lex = if b == b'{' {
                            Lex::Key { first: true }
                        } else {
                            Lex::ArrayFirst
                        };
                    }
                    b'"' => {
                        self.tok.clear();
                        self.tok_overflow = false;
                        let what = if keep_scalar && self.at_request_state() {
                            self.state = StateDigest::new();
                            StrKind::State
                        } else if keep_scalar {
                            StrKind::Kept
                        } else {
                            StrKind::Dropped
                        };
                        self.lex = Lex::Str {
                            what,
                            escape: false,
                        };
                    }
                    b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                        self.tok.clear();
                        self.tok_overflow = false;
                        // A dropped literal only has to be made of literal bytes; kept ones are
                        // checked when they end.
                        if keep_scalar {
                            self.open_member();
                            self.tok.push(b);
                        }
                        self.lex = Lex::Literal { keep: keep_scalar };
                    }
                    _ => self.fail(),
                }
                i + 1
            }
        }
    }

    /// Whether scalars are kept where the next value goes (a dropped container keeps none;
    /// a member with an over-long key is dropped).
    fn role_for_scalars(&self) -> bool {
        match self.stack.last() {
            None => true,
            Some(f) => f.role.keeps_scalars() && (!f.is_object || f.key.is_some()),
        }
    }

    /// Whether the value about to start is the member `requestState` of `params` or `result`.
    fn at_request_state(&self) -> bool {
        self.stack.last().is_some_and(|f| {
            f.is_object
                && matches!(f.role, Role::Params | Role::Scalars)
                && f.key.as_deref() == Some(b"requestState".as_slice())
        })
    }

    fn close(&mut self, is_object: bool) {
        let Some(f) = self.stack.pop() else {
            self.fail();
            return;
        };
        if f.is_object != is_object {
            self.fail();
            return;
        }
        if f.role != Role::Dropped {
            self.out.push(if is_object { b'}' } else { b']' });
        }
        self.after_value();
    }

    fn string_bytes(
        &mut self,
        piece: &[u8],
        mut i: usize,
        what: StrKind,
        mut escape: bool,
    ) -> usize {
        loop {
            if escape {
                if i >= piece.len() {
                    break;
                }
                self.tok_byte(what, piece[i]);
                escape = false;
                i += 1;
                continue;
            }
            let rest = &piece[i..];
            match memchr::memchr2(b'"', b'\\', rest) {
                None => {
                    self.tok_bytes(what, rest);
                    i = piece.len();
                    break;
                }
                Some(j) => {
                    self.tok_bytes(what, &rest[..j]);
                    if rest[j] == b'\\' {
                        self.tok_byte(what, b'\\');
                        escape = true;
                        i += j + 1;
                    } else {
                        i += j + 1;
                        self.end_string(what);
                        return i;
                    }
                }
            }
        }
        self.lex = Lex::Str { what, escape };
        i
    }

    fn tok_bytes(&mut self, what: StrKind, bytes: &[u8]) {
        let cap = match what {
            StrKind::Dropped | StrKind::DroppedKey => return,
            StrKind::State => {
                if bytes.iter().any(|&b| b < 0x20) {
                    self.fail();
                } else {
                    self.state.write(bytes);
                }
                return;
            }
            StrKind::Key => KEY_CAP,
            StrKind::Kept => SCALAR_CAP,
        };
        if bytes.iter().any(|&b| b < 0x20) {
            // Raw control characters are not allowed inside JSON strings.
            self.fail();
            return;
        }
        if self.tok.len() + bytes.len() > cap {
            self.tok_overflow = true;
        } else {
            self.tok.extend_from_slice(bytes);
        }
    }

    fn tok_byte(&mut self, what: StrKind, b: u8) {
        self.tok_bytes(what, &[b]);
    }

    fn end_string(&mut self, what: StrKind) {
        if self.lex == Lex::Failed {
            return;
        }
        match what {
            StrKind::Key => {
                let key = if self.tok_overflow {
                    None
                } else {
                    unescape_key(&self.tok)
                };
                if let Some(f) = self.stack.last_mut() {
                    f.key = key;
                }
                self.lex = Lex::Colon;
                return;
            }
            StrKind::Kept => {
                self.open_member();
                if self.tok_overflow {
                    self.out.extend_from_slice(b"null");
                } else {
                    self.out.push(b'"');
                    let tok = std::mem::take(&mut self.tok);
                    self.out.extend_from_slice(&tok);
                    self.out.push(b'"');
                }
            }
            StrKind::DroppedKey => {
                self.lex = Lex::Colon;
                return;
            }
            StrKind::State => {
                self.open_member();
                self.out.push(b'"');
                let digest = self.state.finish();
                self.out.extend_from_slice(digest.as_bytes());
                self.out.push(b'"');
            }
            StrKind::Dropped => {}
        }
        self.tok.clear();
        self.tok_overflow = false;
        self.after_value();
    }
}

/// A key in its unescaped form, re-escaped as plain JSON (keys with escapes are rare, but
/// `"claudecode\/toolUseId"` is the same key as `"claudecode/toolUseId"`).
fn unescape_key(raw: &[u8]) -> Option<Vec<u8>> {
    if !raw.contains(&b'\\') {
        return Some(raw.to_vec());
    }
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    let s: String = serde_json::from_slice(&quoted).ok()?;
    let json = serde_json::to_string(&s).ok()?;
    Some(json.as_bytes()[1..json.len() - 1].to_vec())
}

fn valid_literal(tok: &[u8]) -> bool {
    match tok {
        b"true" | b"false" | b"null" => true,
        _ => serde_json::from_slice::<serde_json::Number>(tok).is_ok(),
    }
}
