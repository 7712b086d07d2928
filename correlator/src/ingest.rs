//! The ingest protocol (version 1): the lines a wrapper writes to the relay's ingest socket,
//! one report per line (docs/design.md §1, §4; `docs/ingest.md`).
//!
//! Sans-IO: [`Report::parse`] reads one line, [`Report::to_line`] writes one. The socket, the
//! clock conversion and the per-connection bookkeeping stay in the binary (`src/ingest.rs`),
//! which also raises the faults only a connection can have (too long, truncated, from the
//! future, duplicate start, too many running).

use serde_json::{Map, Value};

use crate::event::{Hints, Outcome, Rounds};

/// The protocol version this module writes and reads.
pub(crate) const VERSION: u64 = 1;
/// Longest accepted line; a report is a few hundred bytes.
pub const MAX_LINE: usize = 64 * 1024;
const MAX_ID: usize = 128;
const MAX_NAME: usize = 1024;

/// One report, as the wrapper writes it and the relay reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Start {
        id: String,
        alias: String,
        tool: String,
        start_ns: u64,
        hints: Hints,
    },
    End {
        id: String,
        alias: String,
        tool: String,
        start_ns: u64,
        end_ns: u64,
        outcome: Outcome,
        hints: Hints,
        /// A Multi Round-Trip call's rounds (optional fields `rounds`, `input_wait_ns`,
        /// `outcome_detail`); `None` for a call of one request.
        rounds: Option<RoundsNs>,
    },
    /// What became of the wrapped server itself (`type` `server`): a wrapper says `started`
    /// once its server runs, or why it never did, so that a server that cannot start is named
    /// at the relay's stop instead of leaving a silent zero (issue 40).
    Server { alias: String, state: ServerState },
}

/// What a wrapper says of its server's start (`state`, with its fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// The server process runs (`started`).
    Started,
    /// The server's command could not be started (`spawn_failed`, `error` a fixed word).
    SpawnFailed(SpawnError),
    /// The server exited before it wrote anything to the host (`exited`): an exit `code`, or
    /// the `signal` that ended it.
    ExitedAtStart {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Why a server's command could not be started, as a fixed word (never the command or the
/// operating system's text, which may quote a path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnError {
    /// `not_found`: no such program (not on `PATH`, or a mistyped path).
    NotFound,
    /// `permission_denied`: the file is there but cannot be executed.
    PermissionDenied,
    /// `other`: any other failure.
    Other,
}

impl SpawnError {
    pub fn as_str(self) -> &'static str {
        match self {
            SpawnError::NotFound => "not_found",
            SpawnError::PermissionDenied => "permission_denied",
            SpawnError::Other => "other",
        }
    }

    pub fn parse(word: &str) -> Option<SpawnError> {
        Some(match word {
            "not_found" => SpawnError::NotFound,
            "permission_denied" => SpawnError::PermissionDenied,
            "other" => SpawnError::Other,
            _ => return None,
        })
    }

    /// The word for an error of `std::process::Command::spawn`.
    pub fn of(kind: std::io::ErrorKind) -> SpawnError {
        match kind {
            std::io::ErrorKind::NotFound => SpawnError::NotFound,
            std::io::ErrorKind::PermissionDenied => SpawnError::PermissionDenied,
            _ => SpawnError::Other,
        }
    }
}

impl std::fmt::Display for ServerState {
    /// For a person: what became of the server.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Started => f.write_str("started"),
            ServerState::SpawnFailed(SpawnError::NotFound) => {
                f.write_str("its command was not found (not on PATH, or a mistyped path)")
            }
            ServerState::SpawnFailed(SpawnError::PermissionDenied) => {
                f.write_str("its command could not be executed (permission denied)")
            }
            ServerState::SpawnFailed(SpawnError::Other) => {
                f.write_str("its command could not be started")
            }
            ServerState::ExitedAtStart { code: Some(c), .. } => {
                write!(f, "it exited with code {c} before answering anything")
            }
            ServerState::ExitedAtStart {
                signal: Some(s), ..
            } => write!(f, "it was killed by signal {s} before answering anything"),
            ServerState::ExitedAtStart { .. } => f.write_str("it exited before answering anything"),
        }
    }
}

/// [`crate::Rounds`] as the wrapper measures it, in its nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundsNs {
    pub rounds: u32,
    pub input_wait_ns: u64,
    pub unanswered: bool,
}

/// Why a line was refused. Names the fault, never the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    #[error("line longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("connection closed in the middle of a line")]
    Truncated,
    #[error("not JSON")]
    NotJson,
    #[error("not a JSON object")]
    NotObject,
    #[error("unsupported protocol version (this relay reads v{VERSION})")]
    Version,
    #[error("unknown report type")]
    UnknownType,
    #[error("missing or mistyped field `{0}`")]
    Field(&'static str),
    #[error("end_ns is before start_ns")]
    EndBeforeStart,
    #[error("a time lies ahead of the relay's clock")]
    Future,
    #[error("start for an interval id that is already running")]
    DuplicateStart,
    #[error("too many intervals running on one connection")]
    TooManyRunning,
}

impl Report {
    /// The report as one line of JSON, with its `\n`.
    pub fn to_line(&self) -> String {
        let mut m = Map::new();
        m.insert("v".into(), VERSION.into());
        if let Report::Server { alias, state } = self {
            m.insert("type".into(), "server".into());
            m.insert("alias".into(), alias.as_str().into());
            let word = match state {
                ServerState::Started => "started",
                ServerState::SpawnFailed(_) => "spawn_failed",
                ServerState::ExitedAtStart { .. } => "exited",
            };
            m.insert("state".into(), word.into());
            match state {
                ServerState::Started => {}
                ServerState::SpawnFailed(e) => {
                    m.insert("error".into(), e.as_str().into());
                }
                ServerState::ExitedAtStart { code, signal } => {
                    m.insert("code".into(), code.map_or(Value::Null, Value::from));
                    m.insert("signal".into(), signal.map_or(Value::Null, Value::from));
                }
            }
            let mut line = Value::Object(m).to_string();
            line.push('\n');
            return line;
        }
        let (id, alias, tool, start_ns, hints) = match self {
            Report::Start {
                id,
                alias,
                tool,
                start_ns,
                hints,
            } => {
                m.insert("type".into(), "start".into());
                (id, alias, tool, start_ns, hints)
            }
            Report::End {
                id,
                alias,
                tool,
                start_ns,
                hints,
                ..
            } => {
                m.insert("type".into(), "end".into());
                (id, alias, tool, start_ns, hints)
            }
            Report::Server { .. } => unreachable!("written above"),
        };
        m.insert("id".into(), id.as_str().into());
        m.insert("alias".into(), alias.as_str().into());
        m.insert("tool".into(), tool.as_str().into());
        m.insert("start_ns".into(), (*start_ns).into());
        if let Report::End {
            end_ns,
            outcome,
            rounds,
            ..
        } = self
        {
            m.insert("end_ns".into(), (*end_ns).into());
            m.insert("outcome".into(), outcome.as_str().into());
            if let Some(r) = rounds {
                m.insert("rounds".into(), r.rounds.into());
                m.insert("input_wait_ns".into(), r.input_wait_ns.into());
                if r.unanswered {
                    m.insert("outcome_detail".into(), Rounds::INPUT_UNANSWERED.into());
                }
            }
        }
        for (k, v) in [
            ("tool_use_id", &hints.tool_use_id),
            ("item_id", &hints.item_id),
            ("call_id", &hints.call_id),
            ("thread", &hints.thread),
        ] {
            m.insert(k.into(), v.as_deref().map_or(Value::Null, Value::from));
        }
        let mut line = Value::Object(m).to_string();
        line.push('\n');
        line
    }

    /// Reads one line (without its `\n`).
    pub fn parse(line: &[u8]) -> Result<Report, Fault> {
        let value: Value = serde_json::from_slice(line).map_err(|_| Fault::NotJson)?;
        let Value::Object(m) = value else {
            return Err(Fault::NotObject);
        };
        if m.get("v").and_then(Value::as_u64) != Some(VERSION) {
            return Err(Fault::Version);
        }
        let kind = m
            .get("type")
            .and_then(Value::as_str)
            .ok_or(Fault::Field("type"))?;
        let text = |k: &'static str, max: usize| -> Result<String, Fault> {
            match m.get(k).and_then(Value::as_str) {
                Some(s) if !s.is_empty() && s.len() <= max => Ok(s.to_string()),
                _ => Err(Fault::Field(k)),
            }
        };
        let ns = |k: &'static str| m.get(k).and_then(Value::as_u64).ok_or(Fault::Field(k));
        if kind == "server" {
            return Ok(Report::Server {
                alias: text("alias", MAX_NAME)?,
                state: server_state(&m)?,
            });
        }
        let hint = |k: &'static str| -> Result<Option<String>, Fault> {
            match m.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.len() <= MAX_NAME => Ok(Some(s.clone())),
                Some(_) => Err(Fault::Field(k)),
            }
        };
        let hints = Hints {
            tool_use_id: hint("tool_use_id")?,
            item_id: hint("item_id")?,
            call_id: hint("call_id")?,
            thread: hint("thread")?,
        };
        let (id, alias, tool) = (
            text("id", MAX_ID)?,
            text("alias", MAX_NAME)?,
            text("tool", MAX_NAME)?,
        );
        let start_ns = ns("start_ns")?;
        match kind {
            "start" => Ok(Report::Start {
                id,
                alias,
                tool,
                start_ns,
                hints,
            }),
            "end" => {
                let end_ns = ns("end_ns")?;
                if end_ns < start_ns {
                    return Err(Fault::EndBeforeStart);
                }
                let outcome = m
                    .get("outcome")
                    .and_then(Value::as_str)
                    .and_then(Outcome::parse)
                    .ok_or(Fault::Field("outcome"))?;
                let rounds = rounds_ns(&m, outcome, end_ns - start_ns)?;
                Ok(Report::End {
                    id,
                    alias,
                    tool,
                    start_ns,
                    end_ns,
                    outcome,
                    hints,
                    rounds,
                })
            }
            _ => Err(Fault::UnknownType),
        }
    }
}

/// The `state` of a `server` report and its fields.
fn server_state(m: &Map<String, Value>) -> Result<ServerState, Fault> {
    let int = |k: &'static str| -> Result<Option<i32>, Fault> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(Some)
                .ok_or(Fault::Field(k)),
        }
    };
    match m.get("state").and_then(Value::as_str) {
        Some("started") => Ok(ServerState::Started),
        Some("spawn_failed") => m
            .get("error")
            .and_then(Value::as_str)
            .and_then(SpawnError::parse)
            .map(ServerState::SpawnFailed)
            .ok_or(Fault::Field("error")),
        Some("exited") => Ok(ServerState::ExitedAtStart {
            code: int("code")?,
            signal: int("signal")?,
        }),
        _ => Err(Fault::Field("state")),
    }
}

/// The optional Multi Round-Trip fields of an `end` (docs/ingest.md): all absent is a call of
/// one request.
fn rounds_ns(
    m: &Map<String, Value>,
    outcome: Outcome,
    length: u64,
) -> Result<Option<RoundsNs>, Fault> {
    let (r, w, d) = (
        m.get("rounds"),
        m.get("input_wait_ns"),
        m.get("outcome_detail"),
    );
    if r.is_none() && w.is_none() && d.is_none() {
        return Ok(None);
    }
    let rounds = match r.map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok())) {
        None => 1,
        Some(Some(n)) if n >= 1 => n,
        Some(_) => return Err(Fault::Field("rounds")),
    };
    let input_wait_ns = match w.map(Value::as_u64) {
        None => 0,
        Some(Some(ns)) if ns <= length => ns,
        Some(_) => return Err(Fault::Field("input_wait_ns")),
    };
    let unanswered = match d {
        None => false,
        Some(v)
            if v.as_str() == Some(Rounds::INPUT_UNANSWERED) && outcome == Outcome::Cancelled =>
        {
            true
        }
        Some(_) => return Err(Fault::Field("outcome_detail")),
    };
    Ok(Some(RoundsNs {
        rounds,
        input_wait_ns,
        unanswered,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(tool_use_id: Option<&str>) -> Hints {
        Hints {
            tool_use_id: tool_use_id.map(Into::into),
            ..Hints::default()
        }
    }

    #[test]
    fn reports_round_trip_through_their_line() {
        let reports = [
            Report::Start {
                id: "w1-ab-1".into(),
                alias: "probe".into(),
                tool: "echo".into(),
                start_ns: 5,
                hints: hints(Some("toolu_1")),
            },
            Report::End {
                rounds: None,
                id: "w1-ab-1".into(),
                alias: "probe".into(),
                tool: "echo \"quoted\"".into(),
                start_ns: 5,
                end_ns: 9,
                outcome: Outcome::Cancelled,
                hints: Hints {
                    tool_use_id: None,
                    item_id: Some("fc_1".into()),
                    call_id: Some("call_1".into()),
                    thread: Some("th".into()),
                },
            },
            Report::End {
                id: "w1-ab-2".into(),
                alias: "probe".into(),
                tool: "ask".into(),
                start_ns: 5,
                end_ns: 90,
                outcome: Outcome::Result,
                hints: hints(Some("toolu_2")),
                rounds: Some(RoundsNs {
                    rounds: 3,
                    input_wait_ns: 70,
                    unanswered: false,
                }),
            },
            Report::End {
                id: "w1-ab-3".into(),
                alias: "probe".into(),
                tool: "ask".into(),
                start_ns: 5,
                end_ns: 90,
                outcome: Outcome::Cancelled,
                hints: hints(None),
                rounds: Some(RoundsNs {
                    rounds: 1,
                    input_wait_ns: 80,
                    unanswered: true,
                }),
            },
        ];
        for r in reports {
            let line = r.to_line();
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
            assert_eq!(Report::parse(line.trim_end().as_bytes()), Ok(r));
        }
    }

    #[test]
    fn a_servers_start_or_failure_round_trips_through_its_line() {
        for state in [
            ServerState::Started,
            ServerState::SpawnFailed(SpawnError::NotFound),
            ServerState::SpawnFailed(SpawnError::PermissionDenied),
            ServerState::ExitedAtStart {
                code: Some(3),
                signal: None,
            },
            ServerState::ExitedAtStart {
                code: None,
                signal: Some(9),
            },
        ] {
            let r = Report::Server {
                alias: "probe".into(),
                state,
            };
            let line = r.to_line();
            assert_eq!(Report::parse(line.trim_end().as_bytes()), Ok(r), "{line}");
        }
        assert_eq!(
            Report::parse(br#"{"v":1,"type":"server","alias":"a","state":"spawn_failed","error":"ENOENT /x"}"#),
            Err(Fault::Field("error")),
            "the error is a fixed word"
        );
        assert_eq!(
            Report::parse(br#"{"v":1,"type":"server","alias":"a","state":"gone"}"#),
            Err(Fault::Field("state"))
        );
    }

    #[test]
    fn bad_lines_are_named_by_their_fault() {
        let table: &[(&str, Fault)] = &[
            ("nope", Fault::NotJson),
            ("[1]", Fault::NotObject),
            (r#"{"type":"start"}"#, Fault::Version),
            (r#"{"v":2,"type":"start"}"#, Fault::Version),
            (
                r#"{"v":1,"type":"middle","id":"i","alias":"a","tool":"t","start_ns":1}"#,
                Fault::UnknownType,
            ),
            (
                r#"{"v":1,"type":"start","alias":"a","tool":"t","start_ns":1}"#,
                Fault::Field("id"),
            ),
            (
                r#"{"v":1,"type":"start","id":"","alias":"a","tool":"t","start_ns":1}"#,
                Fault::Field("id"),
            ),
            (
                r#"{"v":1,"type":"start","id":"i","alias":"a","tool":"t","start_ns":-1}"#,
                Fault::Field("start_ns"),
            ),
            (
                r#"{"v":1,"type":"start","id":"i","alias":"a","tool":"t","start_ns":1,"thread":7}"#,
                Fault::Field("thread"),
            ),
            (
                r#"{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":1,"end_ns":2}"#,
                Fault::Field("outcome"),
            ),
            (
                r#"{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":1,"end_ns":2,"outcome":"fine"}"#,
                Fault::Field("outcome"),
            ),
            (
                r#"{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":3,"end_ns":2,"outcome":"result"}"#,
                Fault::EndBeforeStart,
            ),
            (
                r#"{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":1,"end_ns":2,"outcome":"result","rounds":0}"#,
                Fault::Field("rounds"),
            ),
            (
                r#"{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":1,"end_ns":2,"outcome":"result","input_wait_ns":2}"#,
                Fault::Field("input_wait_ns"),
            ),
            (
                r#"{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":1,"end_ns":2,"outcome":"result","outcome_detail":"input_unanswered"}"#,
                Fault::Field("outcome_detail"),
            ),
        ];
        for (line, fault) in table {
            assert_eq!(
                Report::parse(line.as_bytes()).as_ref(),
                Err(fault),
                "{line}"
            );
            // The message names the fault and never repeats the line.
            assert!(!fault.to_string().contains(line));
        }
    }
}
