//! One HTTP body of an MCP mount, read into JSON-RPC skeletons as its pieces pass: a JSON body
//! (one message or a batch), or an SSE stream whose every dispatched event's `data` is one.
//!
//! Why not `observe::sse::SseParser`: it holds an event's whole data before it dispatches it,
//! up to a bound, and an MCP answer's data is the tool's result, of any size (the stdio
//! wrapper reads 32 MiB lines). Here each `data:` line streams straight into a
//! [`LineScanner`], which keeps only the skeleton, so memory stays bounded by the skeleton
//! however large the event; framing is the same WHATWG event-stream interpretation (line ends
//! `\r\n` / `\n` / `\r`, a leading BOM, `:` comments, one optional space after the colon,
//! data lines joined by `\n`, dispatch on a blank line, an event cut by the end dropped).

use crate::event::Millis;
use crate::observe::decode::Decoder;
use crate::observe::jsonrpc::LineScanner;

/// How much one piece may decode to: a compressed piece that would inflate past it is a bomb,
/// not an MCP body, and the body is given up (counted).
const DECODED_PIECE_CAP: usize = 8 << 20;

/// How the body is framed, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `application/json`: the body is one JSON value.
    Json,
    /// `text/event-stream`: each dispatched event's data is one JSON value.
    Sse,
    /// Anything else: not read (a `202` has no body; an HTML error page says nothing).
    Other,
}

impl Framing {
    /// The framing a `Content-Type` value names (parameters and case ignored).
    pub fn of_content_type(content_type: Option<&str>) -> Framing {
        let essence = content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => Framing::Json,
            "text/event-stream" => Framing::Sse,
            _ => Framing::Other,
        }
    }
}

/// A message read from a body: its skeleton (see [`LineScanner`]) and the moment the last
/// piece it needed was read.
pub(super) struct Read {
    pub(super) skeleton: Vec<u8>,
    pub(super) at: Millis,
}

/// What went wrong with a body, as counts (never its bytes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Faults {
    /// The content coding failed or was refused: nothing more is read.
    pub(super) undecodable: bool,
    /// SSE events whose data was empty, not JSON or not UTF-8.
    pub(super) skipped_events: u64,
}

pub(super) struct BodyReader {
    decoder: Option<Decoder>,
    framing: Framing,
    scanner: LineScanner,
    sse: SseLexer,
    decoded: Vec<u8>,
    /// JSON: the moment the last byte other than whitespace was read.
    last_value_at: Option<Millis>,
    pub(super) faults: Faults,
}

impl BodyReader {
    pub(super) fn new(framing: Framing, content_encoding: Option<&str>) -> BodyReader {
        let decoder = Decoder::new(content_encoding).ok();
        BodyReader {
            faults: Faults {
                undecodable: decoder.is_none() && framing != Framing::Other,
                skipped_events: 0,
            },
            decoder,
            framing,
            scanner: LineScanner::new(),
            sse: SseLexer::default(),
            decoded: Vec::new(),
            last_value_at: None,
        }
    }

    /// Reads one piece of the body, read at `at`; complete SSE messages go to `out`.
    pub(super) fn push(&mut self, piece: &[u8], at: Millis, out: &mut Vec<Read>) {
        if self.framing == Framing::Other || self.faults.undecodable {
            return;
        }
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        self.decoded.clear();
        if decoder
            .push(piece, &mut self.decoded, DECODED_PIECE_CAP)
            .is_err()
        {
            self.give_up();
            return;
        }
        self.take_decoded(at, out);
    }

    /// The body ended at `at` (whole or cut): a JSON body's message, if it was complete.
    pub(super) fn finish(&mut self, at: Millis, out: &mut Vec<Read>) {
        if self.framing == Framing::Other || self.faults.undecodable {
            return;
        }
        if let Some(mut decoder) = self.decoder.take() {
            self.decoded.clear();
            if decoder
                .finish(&mut self.decoded, DECODED_PIECE_CAP)
                .is_err()
            {
                self.give_up();
                return;
            }
            self.take_decoded(at, out);
        }
        if self.framing == Framing::Json {
            if let Some(skeleton) = self.scanner.finish() {
                let at = self.last_value_at.unwrap_or(at);
                out.push(Read { skeleton, at });
            }
        }
        // An SSE event not yet dispatched was cut by the end: it carries nothing.
    }

    /// Whether an SSE stream has set a non-empty event id (the 2025 revisions' resumption).
    pub(super) fn event_id_seen(&self) -> bool {
        self.sse.event_id_seen
    }

    /// The bytes this reader holds besides its scanner's skeleton and its decoder's window:
    /// what a large body could make grow if framing were buffered.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.decoded.capacity() + self.sse.name.capacity() + self.sse.bom.capacity()
    }

    fn give_up(&mut self) {
        self.faults.undecodable = true;
        self.decoder = None;
        self.scanner = LineScanner::new();
        self.decoded = Vec::new();
    }

    fn take_decoded(&mut self, at: Millis, out: &mut Vec<Read>) {
        let decoded = std::mem::take(&mut self.decoded);
        match self.framing {
            Framing::Json => {
                if decoded
                    .iter()
                    .any(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
                {
                    self.last_value_at = Some(at);
                }
                self.scanner.push(&decoded);
            }
            Framing::Sse => {
                let skipped = &mut self.faults.skipped_events;
                self.sse
                    .feed(&decoded, &mut self.scanner, &mut |s| match s {
                        Some(skeleton) => out.push(Read { skeleton, at }),
                        None => *skipped += 1,
                    });
            }
            Framing::Other => {}
        }
        // Keep a small buffer for the next piece; let a large one go.
        self.decoded = decoded;
        if self.decoded.capacity() > 64 * 1024 {
            self.decoded = Vec::new();
        }
    }
}

/// The field of the SSE line being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Data,
    Id,
    /// `event`, `retry`, a comment, anything else: skipped.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineState {
    /// At the start of a line.
    Start,
    /// Reading the field name (kept in `name`, up to 5 bytes).
    Name,
    /// Just after the colon: one space may be skipped.
    ValueStart(Field),
    Value(Field),
}

/// The streaming WHATWG event-stream lexer. Data bytes go straight into the scanner; nothing
/// else is kept but the field name being read (at most 5 bytes) and three flags.
#[derive(Debug, Default)]
struct SseLexer {
    state: Option<LineState>,
    name: Vec<u8>,
    name_too_long: bool,
    after_cr: bool,
    /// Bytes of a possible leading BOM (the stream's first bytes only).
    bom: Vec<u8>,
    bom_done: bool,
    /// The current event has had a `data` line.
    has_data: bool,
    /// The current `id` line's value: any byte, and a NUL (which makes the line ignored).
    id_bytes: bool,
    id_nul: bool,
    /// The last `id` line that counted set a non-empty id.
    event_id_seen: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseLexer {
    fn feed(
        &mut self,
        mut bytes: &[u8],
        scanner: &mut LineScanner,
        dispatch: &mut impl FnMut(Option<Vec<u8>>),
    ) {
        if !self.bom_done {
            while !bytes.is_empty() && self.bom.len() < BOM.len() {
                self.bom.push(bytes[0]);
                bytes = &bytes[1..];
                if !BOM.starts_with(&self.bom) {
                    break;
                }
            }
            if self.bom.as_slice() == BOM {
                self.bom_done = true;
            } else if !BOM.starts_with(&self.bom) {
                self.bom_done = true;
                let held = std::mem::take(&mut self.bom);
                self.lex(&held, scanner, dispatch);
            } else {
                return; // still a BOM prefix: wait for more
            }
        }
        self.lex(bytes, scanner, dispatch);
    }

    fn lex(
        &mut self,
        bytes: &[u8],
        scanner: &mut LineScanner,
        dispatch: &mut impl FnMut(Option<Vec<u8>>),
    ) {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                i += 1;
                continue;
            }
            if b == b'\r' || b == b'\n' {
                self.after_cr = b == b'\r';
                self.end_line(scanner, dispatch);
                i += 1;
                continue;
            }
            match self.state.unwrap_or(LineState::Start) {
                LineState::Start | LineState::Name => {
                    if b == b':' {
                        let field = self.field();
                        self.begin_value(field, scanner);
                        self.state = Some(LineState::ValueStart(field));
                    } else {
                        if self.name.len() < 5 {
                            self.name.push(b);
                        } else {
                            self.name_too_long = true;
                        }
                        self.state = Some(LineState::Name);
                    }
                    i += 1;
                }
                LineState::ValueStart(field) => {
                    self.state = Some(LineState::Value(field));
                    if b == b' ' {
                        i += 1;
                    }
                }
                LineState::Value(field) => {
                    // The rest of the line up to its end, at once.
                    let end =
                        memchr::memchr2(b'\r', b'\n', &bytes[i..]).map_or(bytes.len(), |o| i + o);
                    let value = &bytes[i..end];
                    match field {
                        Field::Data => scanner.push(value),
                        Field::Id => {
                            self.id_bytes |= !value.is_empty();
                            self.id_nul |= value.contains(&0);
                        }
                        Field::Other => {}
                    }
                    i = end;
                }
            }
        }
    }

    /// The field named so far.
    fn field(&self) -> Field {
        match (self.name_too_long, self.name.as_slice()) {
            (false, b"data") => Field::Data,
            (false, b"id") => Field::Id,
            _ => Field::Other,
        }
    }

    /// A line of `field` begins its value.
    fn begin_value(&mut self, field: Field, scanner: &mut LineScanner) {
        match field {
            Field::Data => {
                // Data lines of one event are joined with `\n`: whitespace to JSON outside a
                // string, and a fault inside one, as in the joined data.
                if self.has_data {
                    scanner.push(b"\n");
                }
                self.has_data = true;
            }
            Field::Id => {
                self.id_bytes = false;
                self.id_nul = false;
            }
            Field::Other => {}
        }
    }

    fn end_line(&mut self, scanner: &mut LineScanner, dispatch: &mut impl FnMut(Option<Vec<u8>>)) {
        match self.state.take() {
            None | Some(LineState::Start) => {
                // A blank line dispatches the event, if it had data.
                if std::mem::take(&mut self.has_data) {
                    dispatch(scanner.finish());
                }
            }
            Some(LineState::Name) => {
                // A field with no colon: its value is empty.
                let field = self.field();
                self.begin_value(field, scanner);
                self.end_value(field);
            }
            Some(LineState::ValueStart(field)) | Some(LineState::Value(field)) => {
                self.end_value(field)
            }
        }
        self.name.clear();
        self.name_too_long = false;
    }

    fn end_value(&mut self, field: Field) {
        if field == Field::Id && !self.id_nul {
            self.event_id_seen = self.id_bytes;
        }
    }
}
