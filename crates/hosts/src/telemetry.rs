//! `windowtap run --join-host-trace`: the host exports its own trace to windowtap's OTLP
//! endpoint, so that its spans and windowtap's (which the relay puts under the host's, from
//! the `traceparent` of each model request) are one trace (docs/otlp.md, "Joining the host's
//! trace").
//!
//! Only trace export is turned on, toward the traces URL windowtap itself uses: the host's
//! metrics and logs stay as the user configured them. Export headers are not passed on the
//! command line (an argument is visible to every process on the machine): Claude Code reads
//! `OTEL_EXPORTER_OTLP_HEADERS` from the environment it inherits; Codex has none.

use toml::Value;

use crate::plan::Host;

/// Claude Code's switches: telemetry, its traces (a beta), and a `traceparent` header on every
/// model request, toward `traces_url` over OTLP/HTTP protobuf (what windowtap's endpoint
/// speaks).
fn claude_env(traces_url: &str) -> Vec<(String, String)> {
    [
        ("CLAUDE_CODE_ENABLE_TELEMETRY", "1"),
        ("CLAUDE_CODE_ENHANCED_TELEMETRY_BETA", "1"),
        ("CLAUDE_CODE_PROPAGATE_TRACEPARENT", "1"),
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces_url),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Codex's `[otel]` trace exporter, as `-c` overrides: OTLP/HTTP protobuf (`binary`) to the
/// traces URL itself (Codex appends no path).
fn codex_config(traces_url: &str) -> Vec<String> {
    vec![
        "-c".to_string(),
        format!(
            "otel.trace_exporter={{ otlp-http = {{ endpoint = {}, protocol = \"binary\" }} }}",
            Value::String(traces_url.to_string())
        ),
    ]
}

/// The host's command line and environment with its own trace export turned on.
pub(super) fn with_host_export(
    host: Host,
    traces_url: &str,
    mut argv: Vec<String>,
    mut env: Vec<(String, String)>,
) -> (Vec<String>, Vec<(String, String)>) {
    match host {
        Host::Claude => env.extend(claude_env(traces_url)),
        Host::Codex => {
            // Where `codex::plan` puts its own overrides: before a `--`, if any.
            let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
            argv.splice(at..at, codex_config(traces_url));
        }
        // A program's own tracing, if any, is its business: nothing is known to turn on.
        Host::Program => {}
    }
    (argv, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:6006/v1/traces";

    #[test]
    fn claude_code_exports_its_traces_and_propagates_its_context() {
        let (argv, env) = with_host_export(
            Host::Claude,
            URL,
            vec!["-p".into(), "hi".into()],
            vec![("ANTHROPIC_BASE_URL".into(), "http://relay".into())],
        );
        assert_eq!(argv, ["-p", "hi"]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ANTHROPIC_BASE_URL"), Some("http://relay"));
        assert_eq!(get("CLAUDE_CODE_PROPAGATE_TRACEPARENT"), Some("1"));
        assert_eq!(get("CLAUDE_CODE_ENHANCED_TELEMETRY_BETA"), Some("1"));
        assert_eq!(get("OTEL_TRACES_EXPORTER"), Some("otlp"));
        assert_eq!(get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), Some(URL));
    }

    #[test]
    fn codex_gets_a_trace_exporter_override_before_its_double_dash() {
        let (argv, env) = with_host_export(
            Host::Codex,
            URL,
            vec![
                "exec".into(),
                "-c".into(),
                "x=1".into(),
                "--".into(),
                "p".into(),
            ],
            Vec::new(),
        );
        assert!(env.is_empty());
        assert_eq!(
            argv,
            [
                "exec",
                "-c",
                "x=1",
                "-c",
                "otel.trace_exporter={ otlp-http = { endpoint = \"http://127.0.0.1:6006/v1/traces\", protocol = \"binary\" } }",
                "--",
                "p"
            ]
        );
        // The override is TOML Codex can read.
        let table: toml::Table = argv[4].parse().unwrap();
        assert_eq!(
            table["otel"]["trace_exporter"]["otlp-http"]["endpoint"].as_str(),
            Some(URL)
        );
    }
}
