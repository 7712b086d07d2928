//! Mounts: which upstream a request goes to, chosen by the first path segment (docs/design.md §2).
//!
//! `/anthropic/v1/messages?beta=true` on the default table goes to
//! `https://api.anthropic.com/v1/messages?beta=true`; the mount prefix is the only part of the
//! path that changes. Every path under a mount is forwarded, observed or not, with two rules
//! that keep a path what it says:
//!
//! - **Nothing leaves a mount's base path.** A dot segment (`.` or `..`, written plainly or
//!   percent-encoded, between `/`, `\` or their encodings) is refused with a 400
//!   ([`BadPath`]): joined to the base path, `/chatgpt/../../admin` reached the upstream as
//!   `/backend-api/codex/../../admin`, which an upstream that normalizes (RFC 3986 §5.2.4)
//!   serves as `/admin`, outside the prefix a gateway may scope a key by. No host sends one.
//! - **A model route is observed however it is spelled** ([`route_path`]): percent-encoded
//!   unreserved characters, repeated slashes and `;` parameters are what a normalizing
//!   upstream could serve as the route, so the observer decides on the path with them undone.
//!   The bytes forwarded are the client's, unchanged.

use std::borrow::Cow;
use std::fmt;

use http::uri::{Authority, Scheme, Uri};

/// The built-in mounts, before `--upstream NAME=URL` overrides.
pub(crate) const DEFAULT_MOUNTS: [(&str, &str); 3] = [
    ("anthropic", "https://api.anthropic.com"),
    ("openai", "https://api.openai.com"),
    ("chatgpt", "https://chatgpt.com/backend-api/codex"),
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MountError {
    // The flag is named by whoever reports it (`--upstream: …`), so not again here.
    #[error(
        "expects NAME=URL with '=' between the mount's name and its URL, such as \
         anthropic=https://api.anthropic.com; got no '='"
    )]
    MissingEquals,
    #[error("mount name {0:?} must be non-empty and made of letters, digits, '-' and '_'")]
    BadName(String),
    #[error("upstream URL for mount {0:?} is not a valid http:// or https:// URL with a host")]
    BadUrl(String),
    #[error("upstream URL for mount {0:?} must not carry a query or fragment")]
    UrlHasQuery(String),
    #[error(
        "upstream URL for mount {0:?} carries a user name or password (user:password@host): \
         windowtap neither sends nor prints them; give the upstream's credentials to the host \
         (its API key setting), which sends them as headers"
    )]
    UrlHasCredentials(String),
}

/// Why a request path is not forwarded (answered with a 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadPath {
    /// A `.` or `..` segment, in any spelling: it could leave the mount's base path.
    #[error("the path has a dot segment")]
    DotSegment,
    /// The joined path is not a valid request target.
    #[error("the path cannot be joined to the upstream URL")]
    Invalid,
}

/// One mount: `/NAME/...` is forwarded to `base` + `...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub name: String,
    pub scheme: Scheme,
    pub authority: Authority,
    /// The base path without a trailing slash ("" for the root).
    pub base_path: String,
}

impl Mount {
    /// Parses `NAME=URL` as given to `--upstream`.
    pub fn parse_arg(arg: &str) -> Result<Mount, MountError> {
        let (name, url) = arg.split_once('=').ok_or(MountError::MissingEquals)?;
        Mount::new(name, url)
    }

    pub fn new(name: &str, url: &str) -> Result<Mount, MountError> {
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(MountError::BadName(name.to_string()));
        }
        if url.contains('?') || url.contains('#') {
            return Err(MountError::UrlHasQuery(name.to_string()));
        }
        let uri: Uri = url
            .parse()
            .map_err(|_| MountError::BadUrl(name.to_string()))?;
        let scheme = uri
            .scheme()
            .filter(|s| *s == &Scheme::HTTP || *s == &Scheme::HTTPS)
            .cloned()
            .ok_or_else(|| MountError::BadUrl(name.to_string()))?;
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| MountError::BadUrl(name.to_string()))?;
        // Refused rather than dropped: a password in the URL would otherwise be printed in
        // the banner and the log, and sent in `Host`.
        if authority.as_str().contains('@') {
            return Err(MountError::UrlHasCredentials(name.to_string()));
        }
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(Mount {
            name: name.to_string(),
            scheme,
            authority,
            base_path,
        })
    }

    /// The upstream URI for `rest` (the path and query after the mount prefix, starting with
    /// '/' or '?', or empty); a path with a dot segment is refused.
    pub fn upstream_uri(&self, rest: &str) -> Result<Uri, BadPath> {
        if h1::has_dot_segment(rest_path(rest)) {
            return Err(BadPath::DotSegment);
        }
        let mut path_and_query = String::with_capacity(self.base_path.len() + rest.len() + 1);
        path_and_query.push_str(&self.base_path);
        if rest.is_empty() || rest.starts_with('?') {
            path_and_query.push('/');
        }
        path_and_query.push_str(rest);
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
            .map_err(|_| BadPath::Invalid)
    }

    /// The base URL as given (for the start-up message).
    pub fn base_url(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// The mount table.
#[derive(Debug, Clone)]
pub struct Mounts {
    mounts: Vec<Mount>,
}

impl Mounts {
    /// The defaults, then each override in order (a later one replaces an earlier one of the
    /// same name).
    pub fn with_overrides(overrides: &[Mount]) -> Mounts {
        let mut mounts: Vec<Mount> = DEFAULT_MOUNTS
            .iter()
            .map(|(n, u)| Mount::new(n, u).expect("built-in mounts are valid"))
            .collect();
        for m in overrides {
            match mounts.iter_mut().find(|x| x.name == m.name) {
                Some(slot) => *slot = m.clone(),
                None => mounts.push(m.clone()),
            }
        }
        Mounts { mounts }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Mount> {
        self.mounts.iter()
    }

    pub fn get(&self, name: &str) -> Option<&Mount> {
        self.mounts.iter().find(|m| m.name == name)
    }

    /// Splits a request target into its mount and the rest (path after the prefix, with the
    /// query). `/anthropicx/...` does not match `/anthropic`: prefixes end at a segment boundary.
    pub fn route<'a>(&self, path_and_query: &'a str) -> Option<(&Mount, &'a str)> {
        let after_slash = path_and_query.strip_prefix('/')?;
        let end = after_slash.find(['/', '?']).unwrap_or(after_slash.len());
        let name = &after_slash[..end];
        let mount = self.get(name)?;
        Some((mount, &after_slash[end..]))
    }
}

/// A loggable template of a path: no query string, and every segment that is not a word of
/// the model APIs' routes ([`ROUTE_WORDS`]) or a version tag replaced by `{id}`. A segment is
/// free text the client chose (an id, a file name, a project): only fixed words reach the log
/// (docs/design.md §7). Before, any short lowercase word passed, and an outside probe saw
/// `/my-private-project` in the log.
pub(crate) fn path_template(path: &str) -> String {
    let path = path.split('?').next().unwrap_or("");
    let mut out = String::with_capacity(path.len());
    for (i, seg) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if seg.is_empty() || is_route_word(seg) {
            out.push_str(seg);
        } else {
            out.push_str("{id}");
        }
    }
    out
}

/// The words of the paths the hosts and the SDKs use on the Anthropic, OpenAI and ChatGPT
/// APIs (and their telemetry and account routes), sorted.
const ROUTE_WORDS: &[&str] = &[
    "api",
    "assistants",
    "audio",
    "backend-api",
    "batch",
    "batches",
    "cancel",
    "chat",
    "codex",
    "compact",
    "complete",
    "completions",
    "content",
    "conversations",
    "count_tokens",
    "embeddings",
    "event_logging",
    "files",
    "generations",
    "hello",
    "images",
    "input_items",
    "input_tokens",
    "messages",
    "models",
    "moderations",
    "oauth",
    "organizations",
    "profile",
    "realtime",
    "responses",
    "results",
    "runs",
    "sessions",
    "speech",
    "threads",
    "token",
    "transcriptions",
    "translations",
    "uploads",
    "usage",
    "vector_stores",
    "wham",
];

fn is_route_word(seg: &str) -> bool {
    let version = seg.len() <= 4
        && seg.starts_with('v')
        && seg.len() > 1
        && seg[1..].bytes().all(|b| b.is_ascii_digit());
    version || ROUTE_WORDS.binary_search(&seg).is_ok()
}

impl Mount {
    /// A warning for a mount whose upstream is reached in clear text over a network: every
    /// request through it carries its sender's API key and prompt unencrypted. A loopback
    /// upstream (a local gateway, a test server) gets none.
    pub fn clear_text_warning(&self) -> Option<String> {
        if self.scheme != Scheme::HTTP {
            return None;
        }
        (!sys::net::is_loopback_host(self.authority.host())).then(|| {
            format!(
                "mount /{} forwards to a plain http:// upstream: API keys and prompts cross the \
                 network unencrypted (use https:// unless the network is yours)",
                self.name
            )
        })
    }
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{} -> {}", self.name, self.base_url())
    }
}

/// The path an observer routes by: [`rest_path`] as a normalizing upstream would read it
/// ([`h1::route_path`]).
pub(crate) fn route_path(rest: &str) -> Cow<'_, str> {
    h1::route_path(rest_path(rest))
}

/// The path part of `rest` (no query), for routing observers.
pub(crate) fn rest_path(rest: &str) -> &str {
    let p = rest.split('?').next().unwrap_or("");
    if p.is_empty() {
        "/"
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_an_upstream_url_are_refused_and_never_echoed() {
        let err = Mount::parse_arg("gw=https://alice:s3cret-pw@gateway.example/v1").unwrap_err();
        assert_eq!(err, MountError::UrlHasCredentials("gw".into()));
        assert!(!err.to_string().contains("s3cret-pw"), "{err}");
        assert!(!err.to_string().contains("alice"), "{err}");
    }

    #[test]
    fn only_clear_text_upstreams_off_this_machine_are_warned_about() {
        for (url, warned) in [
            ("http://gateway.example/v1", true),
            ("http://10.0.0.5:8080", true),
            ("http://127.0.0.1:9", false),
            ("http://localhost:9", false),
            ("http://[::1]:9", false),
            ("https://gateway.example/v1", false),
        ] {
            let m = Mount::new("gw", url).unwrap();
            assert_eq!(m.clear_text_warning().is_some(), warned, "{url}");
        }
    }

    #[test]
    fn default_mounts_map_paths_under_their_base() {
        let m = Mounts::with_overrides(&[]);
        let (mount, rest) = m.route("/chatgpt/responses?x=1").unwrap();
        assert_eq!(mount.name, "chatgpt");
        assert_eq!(
            mount.upstream_uri(rest).unwrap().to_string(),
            "https://chatgpt.com/backend-api/codex/responses?x=1"
        );
        let (mount, rest) = m.route("/anthropic/v1/messages?beta=true").unwrap();
        assert_eq!(
            mount.upstream_uri(rest).unwrap().to_string(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        let (mount, rest) = m.route("/openai").unwrap();
        assert_eq!(
            mount.upstream_uri(rest).unwrap().to_string(),
            "https://api.openai.com/"
        );
    }

    #[test]
    fn prefixes_end_at_a_segment_boundary() {
        let m = Mounts::with_overrides(&[]);
        assert!(m.route("/anthropicx/v1/messages").is_none());
        assert!(m.route("/nothing/here").is_none());
        assert!(m.route("*").is_none());
    }

    #[test]
    fn overrides_replace_or_add() {
        let over = [
            Mount::parse_arg("anthropic=http://127.0.0.1:9/base/").unwrap(),
            Mount::parse_arg("local=https://localhost:8443").unwrap(),
        ];
        let m = Mounts::with_overrides(&over);
        assert_eq!(m.iter().count(), 4);
        let (mount, rest) = m.route("/anthropic/v1/messages").unwrap();
        assert_eq!(
            mount.upstream_uri(rest).unwrap().to_string(),
            "http://127.0.0.1:9/base/v1/messages"
        );
        assert!(m.get("local").is_some());
    }

    #[test]
    fn bad_upstream_arguments_are_named() {
        assert_eq!(Mount::parse_arg("x"), Err(MountError::MissingEquals));
        let said = Mount::parse_arg("anthropic:http://127.0.0.1:9")
            .unwrap_err()
            .to_string();
        assert!(
            !said.contains("--upstream"),
            "the caller names the flag: {said}"
        );
        assert!(said.contains("anthropic=https://"), "{said}");
        assert_eq!(
            Mount::parse_arg("a b=http://x"),
            Err(MountError::BadName("a b".into()))
        );
        assert_eq!(
            Mount::parse_arg("a=ftp://x"),
            Err(MountError::BadUrl("a".into()))
        );
        assert_eq!(
            Mount::parse_arg("a=http://x/?k=secret"),
            Err(MountError::UrlHasQuery("a".into()))
        );
    }

    /// Hostile spellings of a way out of the mount's base path: each is refused, and the
    /// ordinary paths beside them pass.
    #[test]
    fn a_dot_segment_in_any_spelling_is_refused() {
        let m = Mounts::with_overrides(&[]);
        for target in [
            "/chatgpt/../../../admin/keys",
            "/chatgpt/..",
            "/chatgpt/./responses",
            "/chatgpt/%2e%2e/%2E%2E/admin",
            "/chatgpt/.%2e/admin",
            "/chatgpt/..\\..\\admin",
            "/chatgpt/..%5c..%5cadmin",
            "/chatgpt/..%2f..%2fadmin",
            "/chatgpt/..;x/admin",
            "/chatgpt/..%00/admin",
            "/chatgpt/.%00./admin",
            "/anthropic/v1/../../admin?x=1",
        ] {
            let (mount, rest) = m.route(target).unwrap();
            assert_eq!(
                mount.upstream_uri(rest),
                Err(BadPath::DotSegment),
                "{target}"
            );
        }
        for target in [
            "/chatgpt/responses",
            "/anthropic/v1/messages?next=../x",
            "/chatgpt/files/a..b",
            "/chatgpt/.well-known/x",
            "/chatgpt/...",
        ] {
            let (mount, rest) = m.route(target).unwrap();
            assert!(mount.upstream_uri(rest).is_ok(), "{target}");
        }
    }

    #[test]
    fn a_model_route_is_routed_however_it_is_spelled() {
        for (rest, path) in [
            ("/v1/messages?beta=true", "/v1/messages"),
            ("/v1/%6dessages", "/v1/messages"),
            ("/v1/%6Dessages?x", "/v1/messages"),
            ("//v1//messages", "/v1/messages"),
            ("/v1/messages;x", "/v1/messages"),
            ("/v1;a=b/messages", "/v1/messages"),
            ("/v1/%2Fmessages", "/v1/%2Fmessages"),
            ("/v1/100%", "/v1/100%"),
            ("", "/"),
        ] {
            assert_eq!(route_path(rest), path, "{rest}");
        }
    }

    #[test]
    fn templates_drop_queries_and_ids() {
        assert_eq!(path_template("/v1/messages?beta=true"), "/v1/messages");
        assert_eq!(
            path_template("/v1/responses/resp_68ab12/cancel"),
            "/v1/responses/{id}/cancel"
        );
        assert_eq!(path_template("/api/hello"), "/api/hello");
        assert_eq!(path_template("/responses/compact"), "/responses/compact");
        assert_eq!(path_template("/"), "/");
        assert!(
            ROUTE_WORDS.windows(2).all(|w| w[0] < w[1]),
            "sorted, for the search"
        );
    }

    /// Free text in a path never reaches the log, however plain it looks.
    #[test]
    fn a_word_that_is_no_route_word_is_an_id() {
        for (path, template) in [
            ("/my-private-project", "/{id}"),
            ("/v1/files/correcthorsebatterystaple", "/v1/files/{id}"),
            ("/deadbeefdeadbeefdeadbeefdeadbeef", "/{id}"),
            ("/v1/Messages", "/v1/{id}"),
            ("/v12345/messages", "/{id}/messages"),
        ] {
            assert_eq!(path_template(path), template, "{path}");
        }
    }
}
