//! Where to export, and the few settings windowtap resolves itself: the `--otlp-endpoint` flag
//! and the `OTEL_*` variables of the endpoint, the timeout and the certificate, read the way the
//! OpenTelemetry specification says. The rest of `OTEL_EXPORTER_OTLP_*` and `OTEL_BSP_*` is the
//! OpenTelemetry crates' to read ([`super::export`]).
//!
//! Precedence: the flag, then `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), then
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (a base: `v1/traces` is appended). An invalid flag is an
//! error; an invalid environment value is warned about and ignored, as the OpenTelemetry SDKs
//! do. Error and warning texts name the option, never its value: a URL or a header may carry
//! a credential.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use http::uri::{PathAndQuery, Uri};

/// The OTLP/HTTP path for traces.
pub const TRACES_PATH: &str = "/v1/traces";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{source_name}: not a valid URL ({reason})")]
    BadUrl {
        source_name: &'static str,
        reason: &'static str,
    },
}

/// Where spans are POSTed: an absolute http or https URL.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    uri: Uri,
}

impl Endpoint {
    /// `--otlp-endpoint URL`: `URL/v1/traces`, or exactly URL when it already ends so.
    pub fn from_flag(url: &str) -> Result<Self, ConfigError> {
        let uri = parse(url, "--otlp-endpoint")?;
        if uri.path().ends_with(TRACES_PATH) {
            return Ok(Endpoint { uri });
        }
        Self::with_traces_path(uri, "--otlp-endpoint")
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: a base URL to which the signal path is appended.
    fn from_base(url: &str, source_name: &'static str) -> Result<Self, ConfigError> {
        Self::with_traces_path(parse(url, source_name)?, source_name)
    }

    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: used as is (an empty path is `/`).
    fn exact(url: &str, source_name: &'static str) -> Result<Self, ConfigError> {
        Ok(Endpoint {
            uri: parse(url, source_name)?,
        })
    }

    fn with_traces_path(uri: Uri, source_name: &'static str) -> Result<Self, ConfigError> {
        let mut parts = uri.into_parts();
        let (path, query) = match &parts.path_and_query {
            Some(pq) => (pq.path(), pq.query()),
            None => ("", None),
        };
        let mut joined = path.trim_end_matches('/').to_owned();
        joined.push_str(TRACES_PATH);
        if let Some(q) = query {
            joined.push('?');
            joined.push_str(q);
        }
        parts.path_and_query =
            Some(
                PathAndQuery::try_from(joined).map_err(|_| ConfigError::BadUrl {
                    source_name,
                    reason: "bad path",
                })?,
            );
        let uri = Uri::from_parts(parts).map_err(|_| ConfigError::BadUrl {
            source_name,
            reason: "bad path",
        })?;
        Ok(Endpoint { uri })
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }
}

/// Shown without user information or query, which may hold credentials.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = self.uri.scheme_str().unwrap_or("http");
        let host = self.uri.host().unwrap_or("");
        write!(f, "{scheme}://{host}")?;
        if let Some(port) = self.uri.port_u16() {
            write!(f, ":{port}")?;
        }
        f.write_str(self.uri.path())
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Endpoint({self})")
    }
}

fn parse(url: &str, source_name: &'static str) -> Result<Uri, ConfigError> {
    let bad = |reason| ConfigError::BadUrl {
        source_name,
        reason,
    };
    let uri: Uri = url.trim().parse().map_err(|_| bad("cannot be parsed"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(_) => return Err(bad("the scheme must be http or https")),
        None => return Err(bad("it needs a scheme, http:// or https://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    Ok(uri)
}

/// What windowtap decides itself; everything else (headers, compression, protocol, batching,
/// resource) the `opentelemetry-otlp` and `opentelemetry_sdk` builders read from the
/// environment (docs/otlp.md, "What comes from the OpenTelemetry crates").
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub endpoint: Endpoint,
    /// The bound on one export request and on the flush at stop. The crate resolves
    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` too, but keeps the value to itself and does not
    /// cut a request short with it; windowtap's transport does.
    pub timeout: Duration,
    /// An extra trusted root (PEM) for https endpoints: the crate's HTTP transport does not
    /// read `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`.
    pub ca_file: Option<PathBuf>,
    /// Whether export headers are set (only their presence: the crate reads the values).
    pub headers_set: bool,
    /// The delay of a partial batch when `OTEL_BSP_SCHEDULE_DELAY` is unset: 1 s rather than
    /// the SDK's 5 s (records are few and a user watches for them). `None`: the SDK's.
    pub schedule_delay: Option<Duration>,
    /// Spans per request for replay, which sends its batches itself
    /// (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: the SDK's batch configuration does not say what it
    /// read).
    pub max_batch: usize,
}

impl ExportConfig {
    /// Defaults for an endpoint.
    pub fn new(endpoint: Endpoint) -> Self {
        ExportConfig {
            endpoint,
            timeout: DEFAULT_TIMEOUT,
            ca_file: None,
            headers_set: false,
            schedule_delay: Some(Duration::from_secs(1)),
            max_batch: 512,
        }
    }

    /// A warning for headers (a backend's API key, usually) sent in clear text over a
    /// network: an `http://` endpoint that is not on this machine.
    pub fn clear_text_warning(&self) -> Option<String> {
        let uri = &self.endpoint.uri;
        let loopback = sys::net::is_loopback_host(uri.host().unwrap_or(""));
        (uri.scheme_str() == Some("http") && self.headers_set && !loopback).then(|| {
            "the endpoint is plain http:// and headers are set (OTEL_EXPORTER_OTLP_HEADERS): \
             they cross the network unencrypted (use https://)"
                .to_string()
        })
    }
}

/// The OpenTelemetry default export timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The resolved configuration (`None`: no endpoint anywhere, export is off), with warnings
/// for the user about ignored environment values.
#[derive(Debug)]
pub struct Resolved {
    pub config: Option<ExportConfig>,
    pub warnings: Vec<String>,
}

/// Resolves the flag and the environment (`env` looks a variable up; empty means unset).
///
/// The endpoint is resolved here, not by the crate: the crate exports to `localhost:4318`
/// when nothing is set (windowtap exports only when asked), it does not fall back to
/// `OTEL_EXPORTER_OTLP_ENDPOINT` when the traces variable is invalid, and its error for an
/// invalid one quotes the value, which may carry a credential.
pub fn resolve(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ConfigError> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut warnings = Vec::new();
    let endpoint = match flag {
        Some(url) => Endpoint::from_flag(url)?,
        None => {
            let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
                || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
            if disabled {
                return Ok(Resolved {
                    config: None,
                    warnings,
                });
            }
            let from_env = [
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", false),
            ]
            .into_iter()
            .find_map(|(name, exact)| {
                let url = env(name)?;
                let e = if exact {
                    Endpoint::exact(&url, name)
                } else {
                    Endpoint::from_base(&url, name)
                };
                match e {
                    Ok(e) => Some(e),
                    Err(err) => {
                        warnings.push(format!("{err}; ignored"));
                        None
                    }
                }
            });
            match from_env {
                Some(e) => e,
                // Nothing set, or only invalid values (the warnings say so): export is off.
                None => {
                    return Ok(Resolved {
                        config: None,
                        warnings,
                    })
                }
            }
        }
    };
    let mut c = ExportConfig::new(endpoint);

    // Signal-specific settings win over the generic ones.
    let pick = |generic: &str, traces: &str| {
        env(traces)
            .map(|v| (traces.to_owned(), v))
            .or_else(|| env(generic).map(|v| (generic.to_owned(), v)))
    };

    // The crate takes other protocols only with features windowtap does not build (gRPC
    // would bring tonic), and says so only in its internal log, which is off.
    if let Some((name, v)) = pick(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ) {
        if !v.trim().eq_ignore_ascii_case("http/protobuf") {
            warnings.push(format!(
                "{name}: only http/protobuf is supported; exporting with it"
            ));
        }
    }
    if let Some((name, v)) = pick(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    ) {
        match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => c.timeout = Duration::from_millis(ms),
            _ => warnings.push(format!(
                "{name}: not a positive number of milliseconds; ignored"
            )),
        }
    }
    if let Some((_, v)) = pick(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    ) {
        c.ca_file = Some(PathBuf::from(v.trim()));
    }
    c.headers_set = pick(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    )
    .is_some();
    if env("OTEL_BSP_SCHEDULE_DELAY").is_some() {
        c.schedule_delay = None;
    }
    if let Some(v) = env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") {
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => c.max_batch = n,
            _ => warnings
                .push("OTEL_BSP_MAX_EXPORT_BATCH_SIZE: not a positive number; ignored".to_string()),
        }
    }
    Ok(Resolved {
        config: Some(c),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with_env(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Resolved, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(flag, &|k| map.get(k).cloned())
    }

    fn endpoint_of(flag: Option<&str>, vars: &[(&str, &str)]) -> Option<String> {
        with_env(flag, vars)
            .unwrap()
            .config
            .map(|c| c.endpoint.uri().to_string())
    }

    #[test]
    fn the_flag_gets_the_traces_path_unless_it_has_it() {
        let f = |u| Endpoint::from_flag(u).unwrap().uri().to_string();
        assert_eq!(
            f("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            f("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(f("http://h:6006/v1/traces"), "http://h:6006/v1/traces");
        assert_eq!(f("https://h/otlp/"), "https://h/otlp/v1/traces");
        assert_eq!(f("http://h/p?k=1"), "http://h/p/v1/traces?k=1");
    }

    #[test]
    fn the_environment_follows_the_otel_rules() {
        // Nothing set: export is off.
        assert_eq!(endpoint_of(None, &[]), None);
        // The generic variable is a base.
        assert_eq!(
            endpoint_of(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
            Some("http://c:4318/v1/traces".into())
        );
        // The signal variable is used as is and wins.
        assert_eq!(
            endpoint_of(
                None,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom"),
                ]
            ),
            Some("http://t:1/custom".into())
        );
        // The flag wins over both.
        assert_eq!(
            endpoint_of(
                Some("http://flag:2"),
                &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom")]
            ),
            Some("http://flag:2/v1/traces".into())
        );
        // Empty is unset; disabled SDKs export nothing unless the flag says so.
        assert_eq!(
            endpoint_of(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]),
            None
        );
        assert_eq!(
            endpoint_of(
                None,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_EXPORTER", "none")
                ]
            ),
            None
        );
        assert_eq!(
            endpoint_of(Some("http://f"), &[("OTEL_SDK_DISABLED", "TRUE")]),
            Some("http://f/v1/traces".into())
        );
    }

    #[test]
    fn a_bad_flag_is_an_error_that_does_not_echo_the_url() {
        for url in ["ftp://user:s3cret@h/", "user:s3cret@h", "http://", "::"] {
            let err = with_env(Some(url), &[]).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("--otlp-endpoint: not a valid URL"), "{msg}");
            assert!(!msg.contains("s3cret"), "{msg}");
        }
    }

    #[test]
    fn a_bad_environment_value_is_ignored_with_a_warning() {
        // The bad signal endpoint falls back to the generic one, with a warning.
        let r = with_env(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "nonsense"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
            ],
        )
        .unwrap();
        let c = r.config.as_ref().unwrap();
        assert_eq!(c.endpoint.uri().to_string(), "http://c:4318/v1/traces");
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(r.warnings[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: not a valid URL"));
        assert!(!r.warnings[0].contains("nonsense"));
    }

    #[test]
    fn the_timeout_certificate_and_protocol_come_from_the_environment() {
        let r = with_env(
            Some("http://c"),
            &[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        )
        .unwrap();
        let c = r.config.as_ref().unwrap();
        assert_eq!(c.timeout, Duration::from_millis(1500));
        assert_eq!(
            c.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("only http/protobuf"));
    }

    #[test]
    fn headers_sent_in_clear_text_off_this_machine_are_warned_about() {
        for (url, headers, warned) in [
            ("http://collector.example:4318", true, true),
            ("http://collector.example:4318", false, false),
            ("https://collector.example", true, false),
            ("http://127.0.0.1:4318", true, false),
            ("http://localhost:4318", true, false),
        ] {
            let vars: &[(&str, &str)] = if headers {
                &[("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=s3cret")]
            } else {
                &[]
            };
            let r = with_env(Some(url), vars).unwrap();
            let c = r.config.unwrap();
            assert_eq!(c.clear_text_warning().is_some(), warned, "{url} {headers}");
            assert!(!format!("{c:?}").contains("s3cret"));
        }
    }

    #[test]
    fn the_endpoint_is_shown_without_credentials() {
        let e = Endpoint::from_flag("https://user:s3cret@h:8443/x?token=s3cret").unwrap();
        assert_eq!(e.to_string(), "https://h:8443/x/v1/traces");
    }
}
