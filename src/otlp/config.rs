//! Where and how to export: the `--otlp-endpoint` flag and the standard `OTEL_*` environment
//! variables, resolved the way the OpenTelemetry specification says.
//!
//! Precedence: the flag, then `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), then
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (a base: `v1/traces` is appended). An invalid flag is an
//! error; an invalid environment value is warned about and ignored, as the OpenTelemetry SDKs
//! do. Error and warning texts name the option, never its value: a URL or a header may carry
//! a credential.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
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

/// Everything the exporter needs, with the OpenTelemetry defaults except the batch delay
/// (1 s rather than 5 s: records are few and a user watches for them).
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub endpoint: Endpoint,
    /// Extra request headers (`OTEL_EXPORTER_OTLP_HEADERS`), e.g. a backend's API key.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The bound on one export request, and on the flush at shutdown.
    pub timeout: Duration,
    pub gzip: bool,
    /// An extra trusted root (PEM) for https endpoints.
    pub ca_file: Option<PathBuf>,
    /// Spans waiting to be sent; more are dropped and counted.
    pub max_queue: usize,
    /// Spans per request.
    pub max_batch: usize,
    /// How long a partial batch waits before it is sent.
    pub schedule_delay: Duration,
    /// Resource attributes: `service.name`, `service.version` and whatever the caller adds.
    pub resource: Vec<(String, String)>,
}

impl ExportConfig {
    /// Defaults for an endpoint.
    pub fn new(endpoint: Endpoint) -> Self {
        ExportConfig {
            endpoint,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            gzip: false,
            ca_file: None,
            max_queue: 2048,
            max_batch: 512,
            schedule_delay: Duration::from_secs(1),
            resource: vec![
                ("service.name".into(), "windowtap".into()),
                ("service.version".into(), env!("CARGO_PKG_VERSION").into()),
            ],
        }
    }

    /// Adds (or replaces) a resource attribute.
    pub fn resource_attr(&mut self, key: &str, value: &str) {
        match self.resource.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value.to_owned(),
            None => self.resource.push((key.to_owned(), value.to_owned())),
        }
    }
}

impl ExportConfig {
    /// A warning for headers (a backend's API key, usually) sent in clear text over a
    /// network: an `http://` endpoint that is not on this machine.
    pub fn clear_text_warning(&self) -> Option<String> {
        let uri = &self.endpoint.uri;
        let loopback = crate::net::is_loopback_host(uri.host().unwrap_or(""));
        (uri.scheme_str() == Some("http") && !self.headers.is_empty() && !loopback).then(|| {
            "the endpoint is plain http:// and headers are set (OTEL_EXPORTER_OTLP_HEADERS): \
             they cross the network unencrypted (use https://)"
                .to_string()
        })
    }
}

/// The resolved configuration (`None`: no endpoint anywhere, export is off), with warnings
/// for the user about ignored environment values.
#[derive(Debug)]
pub struct Resolved {
    pub config: Option<ExportConfig>,
    pub warnings: Vec<String>,
}

/// Resolves the flag and the environment (`env` looks a variable up; empty means unset).
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
    if let Some((name, v)) = pick(
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    ) {
        match v.trim().to_ascii_lowercase().as_str() {
            "gzip" => c.gzip = true,
            "none" => c.gzip = false,
            _ => warnings.push(format!("{name}: only gzip or none; ignored")),
        }
    }
    if let Some((_, v)) = pick(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    ) {
        c.ca_file = Some(PathBuf::from(v.trim()));
    }
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        if let Some(v) = env(name) {
            for (k, value) in parse_headers(&v, name, &mut warnings) {
                c.headers.retain(|(existing, _)| *existing != k);
                c.headers.push((k, value));
            }
        }
    }
    let mut count = |name: &str, slot: &mut usize| {
        if let Some(v) = env(name) {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => *slot = n,
                _ => warnings.push(format!("{name}: not a positive number; ignored")),
            }
        }
    };
    count("OTEL_BSP_MAX_QUEUE_SIZE", &mut c.max_queue);
    count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &mut c.max_batch);
    c.max_batch = c.max_batch.min(c.max_queue);
    if let Some(v) = env("OTEL_BSP_SCHEDULE_DELAY") {
        match v.trim().parse::<u64>() {
            Ok(ms) => c.schedule_delay = Duration::from_millis(ms.max(1)),
            _ => warnings
                .push("OTEL_BSP_SCHEDULE_DELAY: not a number of milliseconds; ignored".into()),
        }
    }
    if let Some(v) = env("OTEL_SERVICE_NAME") {
        c.resource_attr("service.name", v.trim());
    }
    Ok(Resolved {
        config: Some(c),
        warnings,
    })
}

/// `key1=value1,key2=value2`, values percent-decoded (the W3C baggage form the spec names).
fn parse_headers(
    s: &str,
    source_name: &str,
    warnings: &mut Vec<String>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        if item.trim().is_empty() {
            continue;
        }
        let parsed = item.split_once('=').and_then(|(k, v)| {
            let name = HeaderName::from_bytes(k.trim().as_bytes()).ok()?;
            let value = HeaderValue::from_bytes(&percent_decode(v.trim())?).ok()?;
            Some((name, value))
        });
        match parsed {
            Some(mut h) => {
                h.1.set_sensitive(true);
                out.push(h);
            }
            None => warnings.push(format!(
                "{source_name}: entry {} is not `name=value`; ignored",
                i + 1
            )),
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
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
                ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ],
        )
        .unwrap();
        let c = r.config.as_ref().unwrap();
        assert_eq!(c.endpoint.uri().to_string(), "http://c:4318/v1/traces");
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.max_queue, 2048);
        assert_eq!(r.warnings.len(), 3, "{:?}", r.warnings);
        assert!(r.warnings[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: not a valid URL"));
    }

    #[test]
    fn batch_and_transport_settings_come_from_the_environment() {
        let r = with_env(
            Some("http://c"),
            &[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16"),
                ("OTEL_BSP_SCHEDULE_DELAY", "50"),
                ("OTEL_SERVICE_NAME", "my-agent"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        )
        .unwrap();
        let c = r.config.as_ref().unwrap();
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert!(c.gzip);
        assert_eq!(
            (c.max_queue, c.max_batch),
            (4, 4),
            "a batch never exceeds the queue"
        );
        assert_eq!(c.schedule_delay, Duration::from_millis(50));
        assert!(c
            .resource
            .contains(&("service.name".to_string(), "my-agent".to_string())));
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
            let mut c = ExportConfig::new(Endpoint::from_flag(url).unwrap());
            if headers {
                c.headers.push((
                    HeaderName::from_static("x-api-key"),
                    HeaderValue::from_static("k"),
                ));
            }
            assert_eq!(c.clear_text_warning().is_some(), warned, "{url} {headers}");
        }
    }

    #[test]
    fn headers_are_decoded_merged_and_never_echoed() {
        let r = with_env(
            Some("http://c"),
            &[
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "api_key=s3cret%3D%3D, x-a = 1 ,broken",
                ),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=2"),
            ],
        )
        .unwrap();
        let c = r.config.as_ref().unwrap();
        let h: Vec<(String, Vec<u8>)> = c
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(
            h,
            [
                ("api_key".to_string(), b"s3cret==".to_vec()),
                ("x-a".to_string(), b"2".to_vec())
            ]
        );
        assert_eq!(r.warnings.len(), 1);
        assert!(!r.warnings[0].contains("s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn the_endpoint_is_shown_without_credentials() {
        let e = Endpoint::from_flag("https://user:s3cret@h:8443/x?token=s3cret").unwrap();
        assert_eq!(e.to_string(), "https://h:8443/x/v1/traces");
    }
}
