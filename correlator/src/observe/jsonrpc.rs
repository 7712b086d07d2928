//! MCP `tools/call` observation over stdio JSON-RPC (docs/design.md §4, protocols.md §4).
//!
//! The wrapper forwards every byte itself; this module only watches copies of the lines, one
//! direction at a time, and says when a `tools/call` started and when it ended. Sans-IO: time
//! comes in with each line as an opaque monotonic reading (the wrapper passes nanoseconds).
//!
//! Two parts:
//! - [`LineScanner`] digests one line, fed in pieces of any size, into a small *skeleton*: the
//!   same JSON with every subtree the observer never reads dropped (arguments, result content,
//!   nested `_meta` objects). A 32 MiB tool result therefore costs one linear pass and a few
//!   hundred bytes of memory, and the answer is the same as for the whole line. Lines that are
//!   not JSON or not UTF-8 digest to nothing.
//! - [`Observer`] pairs requests and responses by JSON-RPC id. `tools/call` only flows client →
//!   server, so only client requests are tracked; their responses come server → client, and a
//!   client `notifications/cancelled` ends them too. Server requests (sampling, elicitation)
//!   live in the server's own id space and are ignored, as are the client's answers to them.
//!   `server/discover` and `initialize` sessions send the same `tools/call`; what the
//!   2026-07-28 revision adds for it, Multi Round-Trip Requests (a call answered
//!   `input_required` and retried with the input), is one call for the host and is reported
//!   as one: see [`Observer`].

use std::collections::HashMap;

use serde_json::Value;

use crate::event::{Hints, Outcome};

/// Which way a line travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host (MCP client) to server: requests such as `tools/call`, cancellations.
    ClientToServer,
    /// Server to host: responses, server notifications and requests.
    ServerToClient,
}

/// A `tools/call` as seen when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// A number unique within this observer, in order of start.
    pub seq: u64,
    /// `params.name`.
    pub tool: String,
    /// The time passed with the request line.
    pub start: u64,
    /// Identity hints from `params._meta`.
    pub hints: Hints,
    /// How many requests the call took: 1, or more for a Multi Round-Trip call (each
    /// `input_required` answer and its retry add one).
    pub rounds: u32,
    /// How long the call waited on the client between an `input_required` answer and its
    /// retry, summed over the rounds (in the units of the times passed in).
    pub input_wait: u64,
    /// Set when the call ended waiting on the client: its last round was answered
    /// `input_required` and no retry came (see [`Observer`] for the bound).
    pub unanswered: bool,
}

/// What the observer saw on one line (or at [`Observer::lose_all`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// A `tools/call` request went to the server.
    Start(Call),
    /// It ended: answered, failed, cancelled or lost, or (a Multi Round-Trip call whose last
    /// round got no retry) cancelled with [`Call::unanswered`] set.
    End {
        call: Call,
        end: u64,
        outcome: Outcome,
    },
}

/// Longest string (raw, between its quotes) or number kept in a skeleton. Longer ones become
/// `null`: an id, method, tool name or hint of that size is not one we could report anyway.
const SCALAR_CAP: usize = 4096;
/// Longest object key we look at. Longer keys drop their member.
const KEY_CAP: usize = 256;
/// Largest skeleton. Past it the line is given up (a message with thousands of scalar members
/// where we keep members is not an MCP message we need).
const SKELETON_CAP: usize = 64 * 1024;
/// Deepest nesting followed (serde_json's own limit). Deeper lines are given up, so that a
/// line of a million `[` costs no more memory than any other.
const MAX_DEPTH: usize = 128;
/// Most `tools/call` requests tracked at once; beyond it new calls are not reported.
pub(crate) const MAX_RUNNING: usize = 65_536;
/// Most calls kept waiting for a Multi Round-Trip retry. Past it the oldest ends as
/// unanswered: a client that leaves this many input requests open has moved on from the
/// oldest, and the memory stays bounded.
pub(crate) const MAX_WAITING: usize = 1024;

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
struct Frame {
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
    stack: Vec<Frame>,
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

/// SHA-256 of a `requestState` string's value (its JSON escapes decoded), fed as its raw bytes
/// stream by. Only the digest is kept, in memory: the state itself is opaque server data the
/// observer must never write, and it may be of any length (an AEAD blob of every answer so
/// far). Decoding the escapes makes `"a\/b"` and `"a/b"` the same state, as they are to the
/// server, whichever JSON writer the client re-serialises the echoed value with.
#[derive(Debug, Clone)]
struct StateDigest {
    hash: sha2::Sha256,
    /// The bytes of an escape sequence still arriving (up to two `\u` escapes of four hex
    /// digits each).
    esc: Vec<u8>,
}

impl StateDigest {
    fn new() -> Self {
        use sha2::Digest;
        StateDigest {
            hash: sha2::Sha256::new(),
            esc: Vec::new(),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
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

    fn finish(&mut self) -> String {
        use sha2::Digest;
        let pending = std::mem::take(&mut self.esc);
        self.hash.update(&pending);
        let d = std::mem::replace(&mut self.hash, sha2::Sha256::new()).finalize();
        hex::encode(d)
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

/// A JSON-RPC id as a map key: strings and integers are distinct ids (`"1"` is not `1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Id {
    Str(String),
    Int(i128),
}

impl Id {
    fn of(v: &Value) -> Option<Id> {
        match v {
            Value::String(s) => Some(Id::Str(s.clone())),
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .map(Id::Int),
            _ => None,
        }
    }
}

/// A call whose last round was answered `input_required`, waiting for the client's retry.
#[derive(Debug)]
struct Waiting {
    call: Call,
    /// When the `input_required` answer went to the client.
    since: u64,
    /// Digest of the answer's `requestState`, if it had one.
    state: Option<String>,
}

/// Pairs `tools/call` requests with their ends. One per MCP session (per wrapped server).
///
/// # Multi Round-Trip Requests (MCP 2026-07-28)
///
/// A server may answer `tools/call` with `result.resultType: "input_required"` (input
/// requests and/or an opaque `requestState`); the client gathers the input and sends the call
/// again, under a new JSON-RPC id, with `params.inputResponses` and the `requestState` echoed
/// back. For the host it is one call, so it is reported as one: it starts with the first
/// request, ends with the last answer, and counts its rounds and the time spent waiting on
/// the client. The `input_required` answer ends nothing; the call waits.
///
/// Matching a retry to its call. A `tools/call` is a retry only if it carries `requestState`
/// or `inputResponses` (the fields exist for nothing else); any other `tools/call` is a new
/// call, however alike. Among the waiting calls with the same tool name and no conflicting
/// identity hint (`_meta` toolUseId / itemId / callId: a host keeps them across the rounds of
/// one tool use, and two different ones are two different calls):
/// - with `requestState`, the call whose answer carried the same state. The state is the
///   server's own binding of the retry to its request (the spec asks servers to put the
///   originating request in it), so an equal state is the strongest evidence there is. It is
///   compared as a SHA-256 digest of its value (escapes decoded, so a client's JSON writer
///   may re-escape it), computed while the line streams by; the value itself is never kept
///   or written, and may be of any length. A state that matches nothing is a new call, and a
///   waiting call of the same tool use then ends unanswered: visible, never a wrong join;
/// - without `requestState` (the answer had none), the one such call, preferring one whose
///   identity hint is equal. Tool name alone cannot tell two waiting calls of the same tool
///   apart, so if more than one remains the retry is not joined to either (reported as a new
///   call) rather than guessed.
///
/// Hints of the retry fill the ones the first round lacked.
///
/// A call waiting for a retry ends `cancelled` with [`Call::unanswered`] set: when the pipe
/// ends ([`lose_all`](Self::lose_all)); when a `tools/call` for the same tool use (same tool
/// name, an equal identity hint) arrives and is not its retry, since the host went on without
/// it; or when more than [`MAX_WAITING`] calls wait (the oldest). There is no time bound: a
/// person answering an elicitation may take hours, and the wrapper has no clock of its own to
/// judge that by.
#[derive(Debug, Default)]
pub struct Observer {
    running: HashMap<Id, Call>,
    waiting: Vec<Waiting>,
    next_seq: u64,
}

impl Observer {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many calls have started and not ended (waiting ones included).
    pub fn running(&self) -> usize {
        self.running.len() + self.waiting.len()
    }

    /// Observes one complete line (without its `\n`) that travelled `dir` at time `t`.
    pub fn line(&mut self, dir: Direction, line: &[u8], t: u64, out: &mut Vec<Observation>) {
        let mut scanner = LineScanner::new();
        scanner.push(line);
        if let Some(skeleton) = scanner.finish() {
            self.skeleton(dir, &skeleton, t, out);
        }
    }

    /// Observes a line already digested by a [`LineScanner`].
    pub fn skeleton(
        &mut self,
        dir: Direction,
        skeleton: &[u8],
        t: u64,
        out: &mut Vec<Observation>,
    ) {
        let Ok(value) = serde_json::from_slice::<Value>(skeleton) else {
            return;
        };
        match value {
            Value::Array(batch) => {
                for msg in &batch {
                    self.message(dir, msg, t, out);
                }
            }
            msg => self.message(dir, &msg, t, out),
        }
    }

    /// Ends every running call as `lost` (the server exited or a pipe broke), and every call
    /// waiting for a retry as unanswered, oldest first.
    pub fn lose_all(&mut self, t: u64, out: &mut Vec<Observation>) {
        let mut ends: Vec<(Call, Outcome)> = self
            .running
            .drain()
            .map(|(_, c)| (c, Outcome::Lost))
            .collect();
        for w in self.waiting.drain(..) {
            ends.push((unanswered(w, t), Outcome::Cancelled));
        }
        ends.sort_by_key(|(c, _)| c.seq);
        for (call, outcome) in ends {
            let end = t.max(call.start);
            out.push(Observation::End { call, end, outcome });
        }
    }

    /// Finds the waiting call a retry continues (see the type's doc), removing it.
    fn take_waiting(&mut self, tool: &str, state: Option<&str>, hints: &Hints) -> Option<Waiting> {
        let candidates: Vec<usize> = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                w.call.tool == tool
                    && w.state.as_deref() == state
                    && !hints_conflict(&w.call.hints, hints)
            })
            .map(|(i, _)| i)
            .collect();
        let pick = match candidates.as_slice() {
            [] => None,
            [one] => Some(*one),
            _ if state.is_some() => Some(candidates[0]),
            many => {
                let same: Vec<usize> = many
                    .iter()
                    .copied()
                    .filter(|&i| hints_agree(&self.waiting[i].call.hints, hints))
                    .collect();
                match same.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                }
            }
        };
        pick.map(|i| self.waiting.remove(i))
    }

    /// Ends, as unanswered, the waiting calls a new (non-retry) request for the same tool use
    /// shows the host has gone on from.
    fn supersede(&mut self, tool: &str, hints: &Hints, t: u64, out: &mut Vec<Observation>) {
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &self.waiting[i];
            if w.call.tool == tool && hints_agree(&w.call.hints, hints) {
                let w = self.waiting.remove(i);
                let call = unanswered(w, t);
                let end = t.max(call.start);
                out.push(Observation::End {
                    call,
                    end,
                    outcome: Outcome::Cancelled,
                });
            } else {
                i += 1;
            }
        }
    }

    fn message(&mut self, dir: Direction, msg: &Value, t: u64, out: &mut Vec<Observation>) {
        let Some(obj) = msg.as_object() else {
            return;
        };
        let method = obj.get("method").and_then(Value::as_str);
        match (dir, method) {
            (Direction::ClientToServer, Some("tools/call")) => {
                let Some(id) = obj.get("id").and_then(Id::of) else {
                    return;
                };
                let params = obj.get("params");
                let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
                    return;
                };
                let hints = params
                    .and_then(|p| p.get("_meta"))
                    .map(hints_of)
                    .unwrap_or_default();
                // Ids must be unique among running requests; a reused one leaves no way to
                // tell the two answers apart, so the older call's end is unknowable.
                if let Some(old) = self.running.remove(&id) {
                    let end = t.max(old.start);
                    out.push(Observation::End {
                        call: old,
                        end,
                        outcome: Outcome::Lost,
                    });
                }
                let state = params
                    .and_then(|p| p.get("requestState"))
                    .and_then(Value::as_str)
                    .map(state_key);
                let retry =
                    state.is_some() || params.is_some_and(|p| p.get("inputResponses").is_some());
                if retry {
                    if let Some(w) = self.take_waiting(tool, state.as_deref(), &hints) {
                        let mut call = w.call;
                        call.rounds = call.rounds.saturating_add(1);
                        call.input_wait = call.input_wait.saturating_add(t.saturating_sub(w.since));
                        fill_hints(&mut call.hints, hints);
                        // No start: the call started with its first round.
                        self.running.insert(id, call);
                        return;
                    }
                }
                // A request for the same tool use that continues none of its waiting calls
                // shows the host went on without them.
                self.supersede(tool, &hints, t, out);
                // Waiting calls count: to the relay they are running (started, not ended),
                // and it takes no more than this many from one wrapper.
                if self.running() >= MAX_RUNNING {
                    return;
                }
                let call = Call {
                    seq: self.next_seq,
                    tool: tool.to_string(),
                    start: t,
                    hints,
                    rounds: 1,
                    input_wait: 0,
                    unanswered: false,
                };
                self.next_seq += 1;
                self.running.insert(id, call.clone());
                out.push(Observation::Start(call));
            }
            (Direction::ClientToServer, Some("notifications/cancelled")) => {
                let request = obj.get("params").and_then(|p| p.get("requestId"));
                if let Some(id) = request.and_then(Id::of) {
                    self.end(&id, t, Outcome::Cancelled, out);
                }
            }
            (Direction::ServerToClient, None) => {
                let Some(id) = obj.get("id").and_then(Id::of) else {
                    return;
                };
                let outcome = if obj.contains_key("error") {
                    Outcome::Error
                } else if let Some(result) = obj.get("result") {
                    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
                        self.wait(&id, result, t, out);
                        return;
                    }
                    if result.get("isError").and_then(Value::as_bool) == Some(true) {
                        Outcome::Error
                    } else {
                        Outcome::Result
                    }
                } else {
                    return;
                };
                self.end(&id, t, outcome, out);
            }
            // Other requests and notifications, the client's answers to server requests, and
            // server notifications (a server's `notifications/cancelled` names its own
            // requests) say nothing about `tools/call`.
            _ => {}
        }
    }

    /// An `input_required` answer: the call waits for the client's retry.
    fn wait(&mut self, id: &Id, result: &Value, t: u64, out: &mut Vec<Observation>) {
        let Some(call) = self.running.remove(id) else {
            return;
        };
        if self.waiting.len() >= MAX_WAITING {
            let oldest = self.waiting.remove(0);
            let call = unanswered(oldest, t);
            let end = t.max(call.start);
            out.push(Observation::End {
                call,
                end,
                outcome: Outcome::Cancelled,
            });
        }
        let state = result
            .get("requestState")
            .and_then(Value::as_str)
            .map(state_key);
        self.waiting.push(Waiting {
            call,
            since: t,
            state,
        });
    }

    fn end(&mut self, id: &Id, t: u64, outcome: Outcome, out: &mut Vec<Observation>) {
        if let Some(call) = self.running.remove(id) {
            let end = t.max(call.start);
            out.push(Observation::End { call, end, outcome });
        }
    }
}

/// The key a `requestState` is compared by. The scanner already put a digest in the skeleton;
/// a line observed whole ([`Observer::line`] on a full parse, as in tests) holds the raw value,
/// which is digested here so that nothing but digests is ever kept.
fn state_key(s: &str) -> String {
    let mut d = StateDigest::new();
    d.write(s.as_bytes());
    d.finish()
}

/// The call, ended while waiting on the client.
fn unanswered(w: Waiting, t: u64) -> Call {
    let mut call = w.call;
    call.input_wait = call.input_wait.saturating_add(t.saturating_sub(w.since));
    call.unanswered = true;
    call
}

/// The identity hints that name one tool use (a thread hint is shared by many calls).
fn identities(h: &Hints) -> [&Option<String>; 3] {
    [&h.tool_use_id, &h.item_id, &h.call_id]
}

/// Two hint sets naming different tool uses.
fn hints_conflict(a: &Hints, b: &Hints) -> bool {
    identities(a)
        .iter()
        .zip(identities(b))
        .any(|(x, y)| matches!((x, y), (Some(x), Some(y)) if x != y))
}

/// Two hint sets naming the same tool use: one identity in common and none different.
fn hints_agree(a: &Hints, b: &Hints) -> bool {
    !hints_conflict(a, b)
        && identities(a)
            .iter()
            .zip(identities(b))
            .any(|(x, y)| matches!((x, y), (Some(x), Some(y)) if x == y))
}

fn fill_hints(h: &mut Hints, from: Hints) {
    h.tool_use_id = h.tool_use_id.take().or(from.tool_use_id);
    h.item_id = h.item_id.take().or(from.item_id);
    h.call_id = h.call_id.take().or(from.call_id);
    h.thread = h.thread.take().or(from.thread);
}

fn hints_of(meta: &Value) -> Hints {
    let s = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    Hints {
        tool_use_id: s("claudecode/toolUseId"),
        item_id: s("itemId"),
        call_id: s("callId"),
        thread: s("threadId"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{ClientToServer as C2S, ServerToClient as S2C};

    /// A compact view of an observation: (start|end, tool, outcome, start, end).
    #[derive(Debug, PartialEq)]
    enum Seen {
        Start(&'static str, u64),
        End(&'static str, Outcome, u64, u64),
    }

    fn run(lines: &[(Direction, &str)]) -> (Vec<Seen>, Vec<Observation>) {
        let mut obs = Observer::new();
        let mut out = Vec::new();
        for (t, (dir, line)) in lines.iter().enumerate() {
            obs.line(*dir, line.as_bytes(), 10 * (t as u64 + 1), &mut out);
        }
        let seen = out
            .iter()
            .map(|o| match o {
                Observation::Start(c) => Seen::Start(leak(&c.tool), c.start),
                Observation::End { call, end, outcome } => {
                    Seen::End(leak(&call.tool), *outcome, call.start, *end)
                }
            })
            .collect();
        (seen, out)
    }

    fn leak(s: &str) -> &'static str {
        Box::leak(s.to_string().into_boxed_str())
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code"}}}"#;
    const INIT_OK: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"0"}}}"#;
    const DISCOVER: &str = r#"{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    const DISCOVER_OK: &str = r#"{"jsonrpc":"2.0","id":"server-discover-probe-1","result":{"resultType":"complete","supportedVersions":["2026-07-28"]}}"#;

    #[test]
    fn a_scripted_table_of_sessions() {
        use Outcome::*;
        #[allow(clippy::type_complexity)]
        let table: Vec<(&str, Vec<(Direction, &str)>, Vec<Seen>)> = vec![
            (
                "initialize era, integer id, Claude Code's field order",
                vec![
                    (C2S, INIT),
                    (S2C, INIT_OK),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                    ),
                    (C2S, r#"{"method":"tools/list","jsonrpc":"2.0","id":1}"#),
                    (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#),
                    (
                        C2S,
                        r#"{"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"claudecode/toolUseId":"toolu_1","progressToken":2}},"jsonrpc":"2.0","id":2}"#,
                    ),
                    (
                        S2C,
                        r#"{"result":{"content":[{"type":"text","text":"hi"}]},"jsonrpc":"2.0","id":2}"#,
                    ),
                ],
                vec![Seen::Start("echo", 60), Seen::End("echo", Result, 60, 70)],
            ),
            (
                "discover era, string ids",
                vec![
                    (C2S, DISCOVER),
                    (S2C, DISCOVER_OK),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"add","arguments":{"a":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","id":"c1","result":{"resultType":"complete","content":[]}}"#,
                    ),
                ],
                vec![Seen::Start("add", 30), Seen::End("add", Result, 30, 40)],
            ),
            (
                "responses out of order",
                vec![
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fast"}}"#,
                    ),
                    (S2C, r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
                    (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
                ],
                vec![
                    Seen::Start("slow", 10),
                    Seen::Start("fast", 20),
                    Seen::End("fast", Result, 20, 30),
                    Seen::End("slow", Result, 10, 40),
                ],
            ),
            (
                "the string id \"1\" is not the integer id 1",
                vec![
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"s"}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"i"}}"#,
                    ),
                    (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
                    (S2C, r#"{"jsonrpc":"2.0","id":"1","result":{}}"#),
                ],
                vec![
                    Seen::Start("s", 10),
                    Seen::Start("i", 20),
                    Seen::End("i", Result, 20, 30),
                    Seen::End("s", Result, 10, 40),
                ],
            ),
            (
                "JSON-RPC error and isError both end as error",
                vec![
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope"}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"Unknown tool"}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"boom"}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","id":6,"result":{"content":[],"isError":true}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fine"}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":false}}"#,
                    ),
                ],
                vec![
                    Seen::Start("nope", 10),
                    Seen::End("nope", Error, 10, 20),
                    Seen::Start("boom", 30),
                    Seen::End("boom", Error, 30, 40),
                    Seen::Start("fine", 50),
                    Seen::End("fine", Result, 50, 60),
                ],
            ),
            (
                "cancellation ends the call; the late answer is ignored",
                vec![
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"wait"}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long","reason":"user"}}"#,
                    ),
                    (S2C, r#"{"jsonrpc":"2.0","id":"long","result":{}}"#),
                ],
                vec![
                    Seen::Start("wait", 10),
                    Seen::End("wait", Cancelled, 10, 30),
                ],
            ),
            (
                "unknown ids, other methods and the server's own requests are ignored",
                vec![
                    (S2C, r#"{"jsonrpc":"2.0","id":99,"result":{}}"#),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":98}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"x"}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"backwards"}}"#,
                    ),
                    (C2S, r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
                    (S2C, r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
                    ),
                ],
                vec![],
            ),
            (
                "a server cancelling its own request does not end the client's call with that id",
                vec![
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t"}}"#,
                    ),
                    (
                        S2C,
                        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#,
                    ),
                    (S2C, r#"{"jsonrpc":"2.0","id":4,"result":{}}"#),
                ],
                vec![Seen::Start("t", 10), Seen::End("t", Result, 10, 30)],
            ),
            (
                "garbage, truncated JSON and calls without a name or id report nothing",
                vec![
                    (C2S, "hello"),
                    (C2S, ""),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x""#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}} trailing"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"no-id"}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"x"}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
                    ),
                    (C2S, r#"[1,2"#),
                    (C2S, r#"{"a":tru}"#),
                    (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
                ],
                vec![],
            ),
            (
                "a reused running id loses the older call",
                vec![
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
                    ),
                    (
                        C2S,
                        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b"}}"#,
                    ),
                    (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
                ],
                vec![
                    Seen::Start("a", 10),
                    Seen::End("a", Lost, 10, 20),
                    Seen::Start("b", 20),
                    Seen::End("b", Result, 20, 30),
                ],
            ),
            (
                "a batch holds several messages",
                vec![
                    (
                        C2S,
                        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}]"#,
                    ),
                    (
                        S2C,
                        r#"[{"jsonrpc":"2.0","id":2,"result":{}},{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}]"#,
                    ),
                ],
                vec![
                    Seen::Start("a", 10),
                    Seen::Start("b", 10),
                    Seen::End("b", Result, 10, 20),
                    Seen::End("a", Error, 10, 20),
                ],
            ),
        ];
        for (name, lines, want) in table {
            let (seen, _) = run(&lines);
            assert_eq!(seen, want, "{name}");
        }
    }

    /// The 2026-07-28 `_meta` every request carries.
    const META26: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}"#;

    fn mrtr_call(id: &str, tool: &str, meta: &str, retry: Option<&str>) -> String {
        let retry = match retry {
            Some(state) => format!(
                r#","inputResponses":{{"ask":{{"action":"accept","content":{{"secret":"CANARY-answer"}}}}}},"requestState":"{state}""#
            ),
            None => String::new(),
        };
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"q":"x"}},"_meta":{{{META26}{meta}}}{retry}}}}}"#
        )
    }

    fn input_required(id: &str, state: Option<&str>) -> String {
        let state = state
            .map(|s| format!(r#","requestState":"{s}""#))
            .unwrap_or_default();
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"ask":{{"method":"elicitation/create","params":{{"mode":"form","message":"CANARY-question","requestedSchema":{{}}}}}}}}{state}}}}}"#
        )
    }

    fn done(id: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"ok"}}],"isError":false}}}}"#
        )
    }

    /// Feeds (direction, line, time) and returns the observations.
    fn feed(lines: &[(Direction, String, u64)]) -> (Observer, Vec<Observation>) {
        let mut obs = Observer::new();
        let mut out = Vec::new();
        for (dir, line, t) in lines {
            obs.line(*dir, line.as_bytes(), *t, &mut out);
        }
        (obs, out)
    }

    /// (start?, tool, rounds, input_wait, start, end, outcome, unanswered) of one observation.
    type Summary = (bool, String, u32, u64, u64, u64, Option<Outcome>, bool);

    /// The [`Summary`] of each observation.
    fn summary(out: &[Observation]) -> Vec<Summary> {
        out.iter()
            .map(|o| match o {
                Observation::Start(c) => (
                    true,
                    c.tool.clone(),
                    c.rounds,
                    c.input_wait,
                    c.start,
                    c.start,
                    None,
                    c.unanswered,
                ),
                Observation::End {
                    call: c,
                    end,
                    outcome,
                } => (
                    false,
                    c.tool.clone(),
                    c.rounds,
                    c.input_wait,
                    c.start,
                    *end,
                    Some(*outcome),
                    c.unanswered,
                ),
            })
            .collect()
    }

    #[test]
    fn a_multi_round_trip_call_is_one_call_with_its_rounds_and_wait() {
        let st = "eyJzdGF0ZSI6IkNBTkFSWS1zdGF0ZSJ9";
        let st2 = "c2Vjb25kLXJvdW5k";
        let (obs, out) = feed(&[
            (
                C2S,
                mrtr_call("1", "book", r#","claudecode/toolUseId":"toolu_1""#, None),
                10,
            ),
            (S2C, input_required("1", Some(st)), 20),
            // The client takes 100 to answer; the retry has a new id.
            (
                C2S,
                mrtr_call(
                    "2",
                    "book",
                    r#","claudecode/toolUseId":"toolu_1""#,
                    Some(st),
                ),
                120,
            ),
            (S2C, input_required("2", Some(st2)), 130),
            (
                C2S,
                mrtr_call(
                    "\"three\"",
                    "book",
                    r#","claudecode/toolUseId":"toolu_1""#,
                    Some(st2),
                ),
                180,
            ),
            (S2C, done("\"three\""), 200),
        ]);
        assert_eq!(
            summary(&out),
            vec![
                (true, "book".into(), 1, 0, 10, 10, None, false),
                (
                    false,
                    "book".into(),
                    3,
                    100 + 50,
                    10,
                    200,
                    Some(Outcome::Result),
                    false
                ),
            ]
        );
        assert_eq!(obs.running(), 0);
    }

    #[test]
    fn before_mrtr_an_input_required_answer_ended_the_call() {
        // The same two rounds as a client sends them: one call, not two.
        let st = "s1";
        let (_, out) = feed(&[
            (C2S, mrtr_call("1", "book", "", None), 1),
            (S2C, input_required("1", Some(st)), 2),
            (C2S, mrtr_call("2", "book", "", Some(st)), 5),
            (S2C, done("2"), 6),
        ]);
        let starts = out
            .iter()
            .filter(|o| matches!(o, Observation::Start(_)))
            .count();
        assert_eq!((starts, out.len()), (1, 2), "{out:?}");
    }

    #[test]
    fn retries_are_matched_by_state_then_by_tool_and_ids() {
        use Outcome::*;
        // Two waiting calls of one tool with different states: each retry joins its own.
        let (_, out) = feed(&[
            (C2S, mrtr_call("1", "t", "", None), 1),
            (C2S, mrtr_call("2", "t", "", None), 2),
            (S2C, input_required("1", Some("A")), 3),
            (S2C, input_required("2", Some("B")), 4),
            (C2S, mrtr_call("3", "t", "", Some("B")), 10),
            (C2S, mrtr_call("4", "t", "", Some("A")), 20),
            (S2C, done("4"), 30),
            (
                S2C,
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#.to_string(),
                40,
            ),
        ]);
        let s = summary(&out);
        assert_eq!(s[2], (false, "t".into(), 2, 17, 1, 30, Some(Result), false));
        assert_eq!(s[3], (false, "t".into(), 2, 6, 2, 40, Some(Error), false));
        assert_eq!(s.len(), 4);

        // Without state: one waiting call of the tool is joined; the inputResponses alone
        // make the request a retry.
        let retry_no_state = |id: &str, meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t","_meta":{{{META26}{meta}}},"inputResponses":{{"a":{{}}}}}}}}"#
            )
        };
        let (_, out) = feed(&[
            (C2S, mrtr_call("1", "t", "", None), 1),
            (S2C, input_required("1", None), 2),
            (C2S, retry_no_state("2", ""), 7),
            (S2C, done("2"), 9),
        ]);
        assert_eq!(
            summary(&out)[1],
            (false, "t".into(), 2, 5, 1, 9, Some(Result), false)
        );

        // Two waiting calls of the tool and nothing to tell them apart: not guessed. The
        // retry is a new call; with a matching tool-use id it is joined.
        let (obs, out) = feed(&[
            (C2S, mrtr_call("1", "t", r#","itemId":"fc_1""#, None), 1),
            (C2S, mrtr_call("2", "t", r#","itemId":"fc_2""#, None), 1),
            (S2C, input_required("1", None), 2),
            (S2C, input_required("2", None), 2),
            (C2S, retry_no_state("3", ""), 5),
            (C2S, retry_no_state("4", r#","itemId":"fc_2""#), 6),
            (S2C, done("4"), 8),
        ]);
        let s = summary(&out);
        assert_eq!(s[2], (true, "t".into(), 1, 0, 5, 5, None, false));
        assert_eq!(s[3], (false, "t".into(), 2, 4, 1, 8, Some(Result), false));
        assert_eq!(
            obs.running(),
            2,
            "fc_1 still waits, the unjoined retry runs"
        );

        // A retry whose state matches nothing, or whose tool-use id differs, is a new call.
        let (_, out) = feed(&[
            (
                C2S,
                mrtr_call("1", "t", r#","claudecode/toolUseId":"toolu_1""#, None),
                1,
            ),
            (S2C, input_required("1", Some("A")), 2),
            (
                C2S,
                mrtr_call("2", "t", r#","claudecode/toolUseId":"toolu_2""#, Some("A")),
                3,
            ),
            (C2S, mrtr_call("3", "u", "", Some("A")), 4),
        ]);
        let starts = out
            .iter()
            .filter(|o| matches!(o, Observation::Start(_)))
            .count();
        assert_eq!(starts, 3, "{out:?}");
    }

    #[test]
    fn a_round_that_never_gets_its_retry_ends_unanswered() {
        // At the end of the pipe, with the wait counted up to then.
        let (mut obs, mut out) = feed(&[
            (C2S, mrtr_call("1", "t", "", None), 1),
            (S2C, input_required("1", Some("A")), 4),
            (C2S, mrtr_call("2", "t", "", None), 5),
        ]);
        obs.lose_all(50, &mut out);
        let s = summary(&out);
        assert_eq!(
            s[2],
            (
                false,
                "t".into(),
                1,
                46,
                1,
                50,
                Some(Outcome::Cancelled),
                true
            )
        );
        assert_eq!(
            s[3],
            (false, "t".into(), 1, 0, 5, 50, Some(Outcome::Lost), false)
        );

        // When the host sends a new request for the same tool use instead of the retry.
        let (obs, out) = feed(&[
            (C2S, mrtr_call("1", "t", r#","callId":"c1""#, None), 1),
            (S2C, input_required("1", Some("A")), 4),
            (C2S, mrtr_call("2", "t", r#","callId":"c1""#, None), 9),
        ]);
        let s = summary(&out);
        assert_eq!(
            s[1],
            (
                false,
                "t".into(),
                1,
                5,
                1,
                9,
                Some(Outcome::Cancelled),
                true
            )
        );
        assert_eq!(s[2], (true, "t".into(), 1, 0, 9, 9, None, false));
        assert_eq!(obs.running(), 1);

        // When too many wait: the oldest.
        let mut lines = Vec::new();
        for n in 0..=MAX_WAITING as u64 {
            lines.push((C2S, mrtr_call(&n.to_string(), "t", "", None), n));
            lines.push((
                S2C,
                input_required(&n.to_string(), Some(&format!("s{n}"))),
                n,
            ));
        }
        let (obs, out) = feed(&lines);
        let ends: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Observation::End { call, .. } => Some((call.seq, call.unanswered)),
                _ => None,
            })
            .collect();
        assert_eq!(ends, vec![(0, true)]);
        assert_eq!(obs.running(), MAX_WAITING);
    }

    #[test]
    fn a_state_is_the_same_state_however_it_is_escaped() {
        // The server writes `\/` and `\u00e9`, the client re-serialises them plainly; split
        // anywhere, the retry still joins its call.
        let server = r"a\/b\u00e9\ud83d\ude00\n";
        let client = "a/b\u{e9}\u{1F600}\\n";
        for cut in 1..8 {
            let mut obs = Observer::new();
            let mut out = Vec::new();
            let scan = |dir, line: String, t, obs: &mut Observer, out: &mut Vec<Observation>| {
                let mut s = LineScanner::new();
                for p in line.as_bytes().chunks(cut) {
                    s.push(p);
                }
                obs.skeleton(dir, &s.finish().unwrap(), t, out);
            };
            scan(C2S, mrtr_call("1", "t", "", None), 1, &mut obs, &mut out);
            scan(
                S2C,
                input_required("1", Some(server)),
                2,
                &mut obs,
                &mut out,
            );
            scan(
                C2S,
                mrtr_call("2", "t", "", Some(client)),
                3,
                &mut obs,
                &mut out,
            );
            scan(S2C, done("2"), 4, &mut obs, &mut out);
            assert_eq!(out.len(), 2, "cut {cut}: {out:?}");
        }
        // And the digest is that of the decoded value.
        let mut raw = StateDigest::new();
        raw.write(server.as_bytes());
        assert_eq!(raw.finish(), state_key("a/b\u{e9}\u{1F600}\n"));
    }

    #[test]
    fn state_and_answers_never_reach_the_skeleton() {
        let st = "CANARY-state-0123456789";
        for line in [
            mrtr_call("2", "t", "", Some(st)),
            input_required("1", Some(st)),
        ] {
            let mut s = LineScanner::new();
            for piece in line.as_bytes().chunks(3) {
                s.push(piece);
            }
            let sk = String::from_utf8(s.finish().unwrap()).unwrap();
            assert!(!sk.contains("CANARY"), "{sk}");
            assert!(sk.contains("\"requestState\":\""), "{sk}");
        }
        let mut s = LineScanner::new();
        s.push(mrtr_call("2", "t", "", Some(st)).as_bytes());
        let sk = String::from_utf8(s.finish().unwrap()).unwrap();
        assert!(sk.contains(r#""inputResponses":{}"#), "{sk}");
        // A state longer than any kept scalar still digests (and still matches).
        let long = "S".repeat(SCALAR_CAP * 4);
        let (_, out) = feed(&[
            (C2S, mrtr_call("1", "t", "", None), 1),
            (S2C, input_required("1", Some(&long)), 2),
            (C2S, mrtr_call("2", "t", "", Some(&long)), 3),
            (S2C, done("2"), 4),
        ]);
        assert_eq!(out.len(), 2, "{out:?}");
    }

    #[test]
    fn hints_come_from_meta_for_both_hosts() {
        let (_, out) = run(&[
            (
                C2S,
                r#"{"method":"tools/call","params":{"name":"echo","_meta":{"claudecode/toolUseId":"toolu_01","progressToken":1}},"jsonrpc":"2.0","id":1}"#,
            ),
            (
                C2S,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"callId":"exec-9","itemId":"fc_1","x-codex-turn-metadata":{"turn_id":"x","nested":{"deep":[1,2]}},"threadId":"th-1","progressToken":1},"name":"echo","arguments":{"text":"hi"}}}"#,
            ),
            (
                C2S,
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","_meta":{"claudecode\/toolUseId":"toolu_esc","itemId":5}}}"#,
            ),
        ]);
        let hints: Vec<Hints> = out
            .into_iter()
            .map(|o| match o {
                Observation::Start(c) => c.hints,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        let h = |t: Option<&str>, i: Option<&str>, c: Option<&str>, th: Option<&str>| Hints {
            tool_use_id: t.map(Into::into),
            item_id: i.map(Into::into),
            call_id: c.map(Into::into),
            thread: th.map(Into::into),
        };
        assert_eq!(
            hints,
            vec![
                h(Some("toolu_01"), None, None, None),
                h(None, Some("fc_1"), Some("exec-9"), Some("th-1")),
                // An escaped key is the same key; a non-string hint is no hint.
                h(Some("toolu_esc"), None, None, None),
            ]
        );
    }

    #[test]
    fn lose_all_ends_running_calls_oldest_first() {
        let mut obs = Observer::new();
        let mut out = Vec::new();
        for (id, name) in [(3, "c"), (1, "a"), (2, "b")] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}"}}}}"#
            );
            obs.line(C2S, line.as_bytes(), id, &mut out);
        }
        out.clear();
        obs.lose_all(100, &mut out);
        let tools: Vec<(&str, Outcome, u64)> = out
            .iter()
            .map(|o| match o {
                Observation::End { call, outcome, end } => (call.tool.as_str(), *outcome, *end),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            tools,
            vec![
                ("c", Outcome::Lost, 100),
                ("a", Outcome::Lost, 100),
                ("b", Outcome::Lost, 100)
            ]
        );
        assert_eq!(obs.running(), 0);
    }

    #[test]
    fn skeleton_drops_what_is_never_read() {
        let mut s = LineScanner::new();
        s.push(br#"{"result":{"content":[{"type":"text","text":"big"}],"isError":true,"#);
        s.push(br#""structuredContent":{"a":[1,{"b":"c"}]}},"jsonrpc":"2.0","id":7}"#);
        let sk = s.finish().unwrap();
        assert_eq!(
            std::str::from_utf8(&sk).unwrap(),
            r#"{"result":{"isError":true},"jsonrpc":"2.0","id":7}"#
        );
    }

    #[test]
    fn a_giant_result_split_anywhere_still_ends_its_call() {
        // 8 MiB of text, including escapes and multi-byte characters, before the id.
        let mut text = String::new();
        while text.len() < 8 << 20 {
            text.push_str("ab\\\"cd é 漢字 \\u00e9 \\\\ ");
        }
        let line = format!(
            r#"{{"result":{{"content":[{{"type":"text","text":"{text}"}}],"isError":false}},"jsonrpc":"2.0","id":"big"}}"#
        );
        for piece_len in [1usize << 20, 4093, 7] {
            let mut obs = Observer::new();
            let mut out = Vec::new();
            let req =
                r#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"read"}}"#;
            obs.line(C2S, req.as_bytes(), 1, &mut out);
            let mut s = LineScanner::new();
            let bytes = line.as_bytes();
            // Only the first and the last 64 KiB go through in small pieces, to keep it quick.
            let (head, rest) = bytes.split_at(64 << 10);
            let (mid, tail) = rest.split_at(rest.len() - (64 << 10));
            for p in head.chunks(piece_len) {
                s.push(p);
            }
            s.push(mid);
            for p in tail.chunks(piece_len) {
                s.push(p);
            }
            let sk = s.finish().expect("a JSON line");
            assert!(sk.len() < 200, "skeleton of {} bytes", sk.len());
            obs.skeleton(S2C, &sk, 2, &mut out);
            assert_eq!(out.len(), 2, "piece length {piece_len}");
            assert!(matches!(
                out[1],
                Observation::End {
                    outcome: Outcome::Result,
                    end: 2,
                    ..
                }
            ));
        }
    }

    #[test]
    fn invalid_utf8_anywhere_digests_to_nothing() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"s":"é"}}}"#;
        let mut s = LineScanner::new();
        s.push(good.as_bytes());
        assert!(s.finish().is_some());
        // A multi-byte character split across pieces is fine.
        let cut = good.find('é').unwrap() + 1;
        s.push(&good.as_bytes()[..cut]);
        s.push(&good.as_bytes()[cut..]);
        assert!(s.finish().is_some());
        // A stray byte inside a dropped string is not.
        let mut bad = good.as_bytes().to_vec();
        let at = good.find('é').unwrap();
        bad[at] = 0xff;
        s.push(&bad);
        assert!(s.finish().is_none());
        // Nor is a sequence cut off at the end of the line.
        s.push(&good.as_bytes()[..cut]);
        assert!(s.finish().is_none());
        // And the scanner is ready for the next line.
        s.push(good.as_bytes());
        assert!(s.finish().is_some());
    }

    #[test]
    fn nesting_deeper_than_serde_follows_is_given_up_without_growing() {
        let mut s = LineScanner::new();
        for _ in 0..1000 {
            s.push(&[b'['; 1000]);
        }
        assert!(s.stack.len() <= MAX_DEPTH);
        assert!(s.finish().is_none());
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        s.push(ok.as_bytes());
        assert!(s.finish().is_some());
    }

    #[test]
    fn over_long_scalars_become_null_and_are_not_reported() {
        let long = "x".repeat(SCALAR_CAP + 1);
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{long}"}}}}"#
        );
        let (seen, _) = run(&[(C2S, &line)]);
        assert_eq!(seen, vec![]);
    }

    #[test]
    fn skeleton_reads_the_same_as_the_whole_line() {
        // For ordinary messages, observing the skeleton equals observing a full parse.
        let lines = [
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"callId":"c","itemId":"i","threadId":"t","x":{"y":[1]}},"name":"echo","arguments":{"text":"hi","n":[1,2,{"z":null}]}}}"#,
            r#"  {"jsonrpc" : "2.0" , "id" : 2 , "result" : { "content" : [ ] , "isError" : false } }  "#,
            r#"{"jsonrpc":"2.0","id":-3,"error":{"code":-32601,"message":"nope","data":{"x":1}}}"#,
            r#"[]"#,
            r#"{}"#,
            r#"42"#,
            r#""str""#,
        ];
        for line in lines {
            let mut s = LineScanner::new();
            s.push(line.as_bytes());
            let sk = s.finish().unwrap_or_else(|| panic!("{line}"));
            let whole: Value = serde_json::from_str(line).unwrap();
            let skel: Value = serde_json::from_slice(&sk).unwrap();
            let pick = |v: &Value| {
                (
                    v.get("id").cloned(),
                    v.get("method").cloned(),
                    v.pointer("/params/name").cloned(),
                    v.pointer("/params/_meta/itemId").cloned(),
                    v.pointer("/result/isError").cloned(),
                    v.get("error").is_some(),
                    v.get("result").is_some(),
                )
            };
            assert_eq!(pick(&whole), pick(&skel), "{line}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use serde_json::json;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z_/]{0,12}",
                "\\PC{0,8}",
                Just("quo\"te\\back\nline\u{1}é漢".to_string()),
                Just("itemId".to_string()),
                Just("params".to_string()),
                Just("requestState".to_string()),
                Just("inputResponses".to_string()),
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                (-1e9f64..1e9).prop_map(|f| json!(f)),
                text().prop_map(Value::from),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::vec((text(), inner), 0..6)
                        .prop_map(|kv| Value::Object(kv.into_iter().collect())),
                ]
            })
        }

        fn id() -> impl Strategy<Value = Value> {
            prop_oneof![
                (0i64..4).prop_map(Value::from),
                "[a-c]".prop_map(Value::from),
                value()
            ]
        }

        fn meta() -> impl Strategy<Value = Value> {
            (
                prop::option::of(prop_oneof![text().prop_map(Value::from), value()]),
                prop::option::of(text()),
                prop::option::of(text()),
                prop::option::of(text()),
                value(),
            )
                .prop_map(|(tu, item, call, thread, extra)| {
                    let mut m = serde_json::Map::new();
                    if let Some(v) = tu {
                        m.insert("claudecode/toolUseId".into(), v);
                    }
                    if let Some(v) = item {
                        m.insert("itemId".into(), v.into());
                    }
                    if let Some(v) = call {
                        m.insert("callId".into(), v.into());
                    }
                    if let Some(v) = thread {
                        m.insert("threadId".into(), v.into());
                    }
                    m.insert("x-codex-turn-metadata".into(), extra);
                    Value::Object(m)
                })
        }

        /// A line and the direction it travels: mostly MCP-shaped, some anything at all.
        fn message() -> impl Strategy<Value = (Direction, Value)> {
            prop_oneof![
                (id(), text(), value(), meta()).prop_map(|(id, name, args, meta)| (
                    Direction::ClientToServer,
                    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args,"_meta":meta}})
                )),
                (id(), value(), prop_oneof![any::<bool>().prop_map(Value::from), value()]).prop_map(
                    |(id, content, is_error)| (
                        Direction::ServerToClient,
                        json!({"result":{"content":content,"isError":is_error},"jsonrpc":"2.0","id":id})
                    )
                ),
                (id(), value()).prop_map(|(id, e)| (Direction::ServerToClient, json!({"jsonrpc":"2.0","id":id,"error":e}))),
                // Multi Round-Trip: an input-required answer, and a retry with the answers
                // and a state from a small set (so that some match and some do not).
                (id(), prop::option::of("[xy]"), value()).prop_map(|(id, state, asks)| {
                    let mut r = json!({"resultType":"input_required","inputRequests":asks});
                    if let Some(s) = state {
                        r["requestState"] = s.into();
                    }
                    (Direction::ServerToClient, json!({"jsonrpc":"2.0","id":id,"result":r}))
                }),
                (id(), "[ab]", prop::option::of("[xy]"), value(), meta()).prop_map(|(id, name, state, answers, meta)| {
                    let mut p = json!({"name":name,"inputResponses":answers,"_meta":meta});
                    if let Some(s) = state {
                        p["requestState"] = s.into();
                    }
                    (Direction::ClientToServer, json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":p}))
                }),
                id().prop_map(|id| (
                    Direction::ClientToServer,
                    json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id}})
                )),
                (any::<bool>(), value()).prop_map(|(up, v)| (
                    if up { Direction::ClientToServer } else { Direction::ServerToClient },
                    v
                )),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Whatever the lines and however they are cut into pieces, observing through the
            /// skeleton gives exactly what observing the whole parsed line gives.
            #[test]
            fn the_skeleton_observes_like_the_whole_line(
                msgs in prop::collection::vec(message(), 1..12),
                cuts in prop::collection::vec(1usize..64, 1..8),
            ) {
                let mut fast = Observer::new();
                let mut whole = Observer::new();
                let (mut got, mut want) = (Vec::new(), Vec::new());
                let mut scanner = LineScanner::new();
                for (n, (dir, msg)) in msgs.iter().enumerate() {
                    let line = serde_json::to_vec(msg).unwrap();
                    let mut rest = &line[..];
                    let mut k = 0;
                    while !rest.is_empty() {
                        let take = cuts[k % cuts.len()].min(rest.len());
                        scanner.push(&rest[..take]);
                        rest = &rest[take..];
                        k += 1;
                    }
                    let t = n as u64;
                    if let Some(sk) = scanner.finish() {
                        fast.skeleton(*dir, &sk, t, &mut got);
                    } else {
                        prop_assert!(false, "a JSON line digests: {}", String::from_utf8_lossy(&line));
                    }
                    whole.skeleton(*dir, &line, t, &mut want);
                }
                prop_assert_eq!(got, want);
            }

            /// Interleaved Multi Round-Trip calls, each of its own number of rounds, with states
            /// written with or without escapes and lines cut anywhere: each is one start and one
            /// end, with its rounds, however the rounds of different calls interleave.
            #[test]
            fn interleaved_multi_round_trip_calls_are_one_call_each(
                plan in prop::collection::vec((1u32..4, any::<bool>(), any::<bool>()), 1..6),
                order in prop::collection::vec(any::<prop::sample::Index>(), 0..64),
                cuts in prop::collection::vec(1usize..48, 1..6),
            ) {
                // Each call: (rounds, escape its states, give it a tool-use id).
                let mut next_id = 0u64;
                let mut pending: Vec<(usize, u32)> = plan.iter().enumerate().map(|(c, _)| (c, 0)).collect();
                let mut lines: Vec<(Direction, String)> = Vec::new();
                let mut k = 0;
                while !pending.is_empty() {
                    let pick = order.get(k).map_or(0, |i| i.index(pending.len()));
                    k += 1;
                    let (c, done_rounds) = pending[pick];
                    let (rounds, escape, with_id) = plan[c];
                    let id = next_id;
                    next_id += 1;
                    let state = |r: u32, escaped: bool| {
                        if escaped { format!("c{c}\\/r{r}\\u0041") } else { format!("c{c}/r{r}A") }
                    };
                    let meta = if with_id { format!(r#","claudecode/toolUseId":"tu{c}""#) } else { String::new() };
                    let retry = (done_rounds > 0).then(|| state(done_rounds, false));
                    lines.push((Direction::ClientToServer, mrtr_call(&id.to_string(), "same", &meta, retry.as_deref())));
                    if done_rounds + 1 < rounds {
                        lines.push((Direction::ServerToClient, input_required(&id.to_string(), Some(&state(done_rounds + 1, escape)))));
                        pending[pick].1 += 1;
                    } else {
                        lines.push((Direction::ServerToClient, done(&id.to_string())));
                        pending.remove(pick);
                    }
                }
                let mut obs = Observer::new();
                let mut out = Vec::new();
                let mut scanner = LineScanner::new();
                for (n, (dir, line)) in lines.iter().enumerate() {
                    let mut rest = line.as_bytes();
                    let mut j = n;
                    while !rest.is_empty() {
                        let take = cuts[j % cuts.len()].min(rest.len());
                        scanner.push(&rest[..take]);
                        rest = &rest[take..];
                        j += 1;
                    }
                    let sk = scanner.finish().expect("a JSON line");
                    obs.skeleton(*dir, &sk, n as u64, &mut out);
                }
                let mut rounds: Vec<u32> = out.iter().filter_map(|o| match o {
                    Observation::End { call, outcome: Outcome::Result, .. } => Some(call.rounds),
                    _ => None,
                }).collect();
                let starts = out.iter().filter(|o| matches!(o, Observation::Start(_))).count();
                let mut want: Vec<u32> = plan.iter().map(|p| p.0).collect();
                rounds.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(starts, plan.len(), "{:?}", out);
                prop_assert_eq!(rounds, want);
                prop_assert_eq!(obs.running(), 0);
            }

            /// Bytes that are not one JSON value never digest to anything.
            #[test]
            fn garbage_never_digests(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
                let mut s = LineScanner::new();
                s.push(&bytes);
                let digested = s.finish();
                let is_json = serde_json::from_slice::<Value>(&bytes).is_ok();
                if !is_json {
                    prop_assert!(digested.is_none(), "{:?}", String::from_utf8_lossy(&bytes));
                }
            }
        }
    }
}
