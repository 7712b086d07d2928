//! Where observed data enters the writable domain (the first half of the door).

use crate::event::{EventKind, Text};
use crate::pseudo::Pseudonymizer;

use super::kinds::{is_model_name, is_tool_name, is_word};

/// Where observed data enters the writable domain: ids pseudonymized, names checked.
#[derive(Clone)]
pub struct Scrub {
    pseudo: Pseudonymizer,
}

impl Scrub {
    pub fn new(pseudo: Pseudonymizer) -> Self {
        Scrub { pseudo }
    }

    /// A tool name as is when the APIs allow it, else `~` and the pseudonym of its bytes.
    pub(crate) fn tool_name(&self, name: String) -> String {
        if is_tool_name(&name) {
            name
        } else {
            format!("~{}", self.pseudo.id(&name))
        }
    }

    /// A model name as is when the APIs allow it, else `~` and the pseudonym of its bytes.
    pub(crate) fn model_name(&self, name: String) -> String {
        if is_model_name(&name) {
            name
        } else {
            format!("~{}", self.pseudo.id(&name))
        }
    }

    /// A word as is when it is one, else `other`.
    fn word(word: String) -> String {
        if is_word(&word) {
            word
        } else {
            "other".to_string()
        }
    }

    fn id(&self, raw: &str) -> String {
        self.pseudo.id(raw)
    }

    /// The event with every id pseudonymized and every name and word admissible; kinds,
    /// statuses and times are kept.
    pub fn event(&self, kind: EventKind) -> EventKind {
        kind.map_strings(|text, s| match text {
            Text::Id => self.id(&s),
            Text::ToolName => self.tool_name(s),
            Text::ModelName => self.model_name(s),
            Text::Word => Self::word(s),
        })
    }
}
