//! `windowtap lookup`: the records of an id the user has.
//!
//! Every id a live run writes is a pseudonym (an HMAC of the raw id under the run's key,
//! docs/design.md §7), so the one question windowtap answers ("which response did this call
//! run in?") could not be asked about a call a person saw: Claude Code shows `toolu_…`, the
//! records say `93edafd3…`. The run keeps its key beside its records, readable by its owner
//! only (`<records>.key`, mode 0600); lookup computes the pseudonym of the raw id given and
//! finds it. Nothing raw is written anywhere, here included: the id is neither stored nor
//! echoed.
//!
//! Where an id can be found: a response, request or thread id (`msg_…`, `resp_…`, a Codex
//! thread id) in the records' windows; an interval id in the records; a model's call id
//! (`toolu_…`, a Codex `call_…` or item id `fc_…`) only in the capture, which holds the
//! calls and the ids each MCP call was made for: a call id leads to its MCP interval (the host
//! put it in the call's `_meta`) or to the response that made it, and from there to the
//! record.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use correlator::Pseudonymizer;
use serde_json::Value;

#[derive(clap::Args)]
#[command(after_help = "\
The key is the one the run kept beside its records (`<records>.key`, mode 0600; \
`--id-key-file` if the run was given one). A call id (`toolu_…`, `call_…`, `fc_…`) needs the \
run's capture (--capture), which holds the calls; a response, request or thread id is found in \
the records alone.

Examples:
  windowtap lookup toolu_01AbC… --records ~/.local/state/windowtap/records-2026-12-07T23-56-30Z.jsonl
  windowtap lookup toolu_01AbC… --records r.jsonl --capture t.jsonl")]
pub struct LookupArgs {
    /// The raw id as the host or the API showed it: a `toolu_…`, a response or message id, a
    /// Codex call, item or thread id.
    #[arg(value_name = "ID")]
    id: String,
    /// The run's records file.
    #[arg(long, value_name = "FILE")]
    records: PathBuf,
    /// The run's capture, to find a model's call id.
    #[arg(long, value_name = "FILE")]
    capture: Option<PathBuf>,
    /// The run's key [default: the records file's name with `.key` added].
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

/// What the pseudonym was found as, and where that leads.
#[derive(Debug, Default)]
struct Leads {
    /// MCP intervals made for the call (its id in their `_meta`).
    intervals: Vec<String>,
    /// Responses that made the call.
    responses: Vec<String>,
    /// What each lead is, for the person (fixed words and pseudonyms only).
    said: Vec<String>,
}

pub fn main(args: LookupArgs) -> anyhow::Result<ExitCode> {
    let key_path = args
        .key
        .clone()
        .unwrap_or_else(|| live::service::key_path(&args.records));
    let key = live::service::read_key(&key_path).with_context(|| {
        format!(
            "no key for these records: the run keeps one at {} (give --key FILE if it was \
             given --id-key-file)",
            key_path.display()
        )
    })?;
    let p = Pseudonymizer::new(&key).id(&args.id);
    let mut leads = Leads::default();
    if let Some(capture) = &args.capture {
        scan_capture(capture, &p, &mut leads)?;
    }
    let file = std::fs::File::open(&args.records)
        .with_context(|| format!("{}: cannot read", args.records.display()))?;
    let mut found = 0usize;
    let mut epoch = None;
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading {}", args.records.display()))?;
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["type"] == "run" {
            epoch = v["epoch_unix_ms"].as_f64();
            continue;
        }
        let Some(why) = matches(&v, &p, &leads) else {
            continue;
        };
        found += 1;
        let at = epoch
            .and_then(|e| v["start"].as_f64().map(|s| e + s))
            .map(|ms| format!(", started {}", wall_clock(ms)))
            .unwrap_or_default();
        println!("# {why}{at}");
        println!("{line}");
    }
    for s in &leads.said {
        eprintln!("windowtap lookup: {s}");
    }
    if found == 0 {
        let hint = if args.capture.is_none() {
            " (a model's call id, such as a `toolu_…`, is only in the capture: give --capture)"
        } else {
            ""
        };
        bail!("the id is in none of these records{hint}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the capture for the calls and MCP intervals the pseudonym names.
fn scan_capture(capture: &PathBuf, p: &str, leads: &mut Leads) -> anyhow::Result<()> {
    let file = std::fs::File::open(capture)
        .with_context(|| format!("{}: cannot read", capture.display()))?;
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading {}", capture.display()))?;
        if !line.contains(p) {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let is = |k: &str| v[k].as_str() == Some(p);
        match v["type"].as_str() {
            Some("tool_call") if is("call") || is("item") => {
                if let Some(r) = v["response"].as_str() {
                    leads.responses.push(r.to_string());
                    leads.said.push(format!(
                        "the id is the model's call `{}` of response {r}",
                        v["name"].as_str().unwrap_or("?")
                    ));
                }
            }
            Some("mcp_interval") if is("tool_use_id") || is("item_id") || is("call_id") => {
                if let Some(i) = v["interval"].as_str() {
                    leads.intervals.push(i.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Why a record is one the pseudonym leads to, or `None`.
fn matches(r: &Value, p: &str, leads: &Leads) -> Option<String> {
    let interval = r["interval"].as_str().unwrap_or_default();
    if interval == p {
        return Some(format!("the record of interval {interval}"));
    }
    if leads.intervals.iter().any(|i| i == interval) {
        return Some(format!(
            "the MCP call the host made for this call id: interval {interval}"
        ));
    }
    let w = &r["window"];
    for field in ["response", "request", "thread", "stream"] {
        if w[field].as_str() == Some(p) {
            return Some(format!("a call in the window of this {field}"));
        }
    }
    let response = w["response"].as_str()?;
    leads
        .responses
        .iter()
        .any(|x| x == response)
        .then(|| format!("a call in the window of response {response}, which made this call"))
}

/// Unix milliseconds as a UTC time of day a person reads: `2026-12-07T23:56:30.123Z`.
pub fn wall_clock(unix_ms: f64) -> String {
    let ms = unix_ms.max(0.0).round() as u64;
    let (year, month, day, h, m, s) = sys::clock::utc_civil(ms / 1000);
    let frac = ms % 1000;
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{frac:03}Z")
}

#[cfg(test)]
mod tests {
    #[test]
    fn wall_clock_is_utc_to_the_millisecond() {
        assert_eq!(super::wall_clock(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::wall_clock(1_796_294_130_123.4),
            "2026-12-03T10:35:30.123Z"
        );
    }
}
