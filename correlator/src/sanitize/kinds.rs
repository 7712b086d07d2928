//! The allow-listed kinds of data and what each admits (the table in the module above), and
//! how an error message may quote a value from input: the predicates every check of the door
//! and every reader's error is made of, with nothing of their own to import.

use std::borrow::Cow;
use std::fmt;

/// The longest name admitted (a replayed trace's file name), in bytes.
pub(crate) const MAX_NAME: usize = 1024;
/// The longest tool or model name admitted, in bytes: the longest name the model APIs take
/// (Codex cuts MCP names to 128, docs/design.md §4).
pub(crate) const MAX_TOOL_NAME: usize = 128;
/// The longest word admitted, in bytes.
pub(crate) const MAX_WORD: usize = 64;
/// The longest opaque id a replayed trace may carry, in bytes.
pub(crate) const MAX_ID: usize = 1024;

/// The allow-listed kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pseudonym,
    Id,
    Name,
    ToolName,
    ModelName,
    Word,
    Number,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Pseudonym => "pseudonymous id (32 lowercase hex digits)",
            Kind::Id => "id (1 to 1024 bytes, no control character)",
            Kind::Name => "name (1 to 1024 bytes, no control character)",
            Kind::ToolName => "tool name ([A-Za-z0-9_.:-], 1 to 128 bytes, or ~ and a pseudonym)",
            Kind::ModelName => {
                "model name ([A-Za-z0-9_.:/@-], 1 to 128 bytes, or ~ and a pseudonym)"
            }
            Kind::Word => "word ([a-z0-9_], at most 64 bytes)",
            Kind::Number => "number",
        })
    }
}

/// An HMAC pseudonym as [`Pseudonymizer::id`](crate::Pseudonymizer::id) writes it.
pub(crate) fn is_pseudonym(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An opaque id of a trace file (a capture's pseudonym, or a hand-written `s1`).
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID && !s.chars().any(char::is_control)
}

/// A trace's file name: short, one line, no control characters.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && !s.chars().any(char::is_control)
}

/// What [`Scrub`](super::Scrub) writes for a name it does not admit: `~` and a pseudonym.
fn is_pseudonymized_name(s: &str) -> bool {
    s.strip_prefix('~').is_some_and(is_pseudonym)
}

/// 1 to [`MAX_TOOL_NAME`] bytes, each `[A-Za-z0-9_.:-]` or one of `extra`.
fn is_api_name(s: &str, extra: &[u8]) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOOL_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b) || extra.contains(&b))
}

/// A model-visible tool name, namespace, MCP alias or MCP tool name, as the APIs allow them
/// (docs/design.md §7), or the pseudonym written for one that is not.
pub fn is_tool_name(s: &str) -> bool {
    is_api_name(s, b"") || is_pseudonymized_name(s)
}

/// A model name: a tool name's characters and `/`, `@` (`org/model`, `model@version`), or the
/// pseudonym written for one that is not.
pub fn is_model_name(s: &str) -> bool {
    is_api_name(s, b"/@") || is_pseudonymized_name(s)
}

/// A fixed word: what reasons, statuses and types are made of.
pub(crate) fn is_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_WORD
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// A value from input, as an error message may quote it: a short token or a pseudonym as
/// is, anything else only by its length (it could be content, or a credential).
pub fn quote(s: &str) -> Cow<'_, str> {
    let token = s.len() <= 24
        && !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if token || is_pseudonym(s) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("<{} bytes withheld>", s.len()))
    }
}
