//! Messages that say what to do: option values the parser would only call invalid, and the
//! common failures of starting up (a port in use, an output directory that is not there).
//! Each names what was wrong and the way out; none echoes more of the input than the user
//! typed as an option value.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

/// `--listen`: `IP:PORT`, `localhost:PORT` (loopback, 127.0.0.1) or a bare `PORT` (on
/// 127.0.0.1). A host name other than localhost is refused with an example: the relay binds
/// an address, and resolving a name could pick a non-loopback one.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    // A bare port, or `:PORT` (as the port-in-use advice writes it): loopback.
    if let Ok(port) = s.strip_prefix(':').unwrap_or(s).parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Some((host, port)) = s.rsplit_once(':') {
        if host.eq_ignore_ascii_case("localhost") {
            if let Ok(port) = port.parse::<u16>() {
                return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
            }
        }
    }
    Err(
        "give an IP address and a port, such as 127.0.0.1:8791 ([::1]:8791 for IPv6; \
         localhost:8791, :8791 or a bare 8791 mean 127.0.0.1:8791)"
            .to_string(),
    )
}

/// A number of milliseconds >= 0, fractions allowed (`--close-wait`, `--max-window`).
pub fn parse_ms(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err("give a number of milliseconds >= 0, such as 1000".to_string()),
        Err(_) => {
            Err("give a number of milliseconds, such as 1000 (fractions allowed)".to_string())
        }
    }
}

/// A whole number of milliseconds (the timeouts and the drain).
pub fn parse_whole_ms(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| "give a whole number of milliseconds, such as 10000".to_string())
}

/// Why `path` could not be created, with the way out when it is the usual one: its directory
/// is not there.
pub fn create_failed(what: &str, path: &Path, e: std::io::Error) -> anyhow::Error {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if e.kind() == std::io::ErrorKind::NotFound {
        if let Some(dir) = parent.filter(|d| !d.exists()) {
            return anyhow::anyhow!(
                "creating {what} {}: the directory {} does not exist; create it first \
                 (mkdir -p {}) or give a path in a directory that does",
                path.display(),
                dir.display(),
                dir.display()
            );
        }
    }
    anyhow::Error::new(e).context(format!("creating {what} {}", path.display()))
}

/// Why the relay could not listen on `addr`, with the way out for a port in use.
pub fn listen_failed(addr: SocketAddr, e: std::io::Error) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: port {port} is in use (another windowtap relay? `ss -ltnp \
             'sport = :{port}'` names the process). Stop it, or start this relay on another \
             port with --listen 127.0.0.1:PORT (or :0 for any free one, printed at start); a \
             second relay also needs an ingest socket of its own (--ingest PATH)",
            port = addr.port()
        ),
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "cannot listen on {addr}: no interface of this machine has that address; use \
             127.0.0.1:PORT"
        ),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot listen on {addr}: permission denied (ports below 1024 need privileges); \
             use a port above 1023, such as 127.0.0.1:8787"
        ),
        _ => anyhow::Error::new(e).context(format!("listening on {addr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_a_person_types() {
        assert_eq!(
            parse_listen("127.0.0.1:8791").unwrap().to_string(),
            "127.0.0.1:8791"
        );
        assert_eq!(
            parse_listen("localhost:8791").unwrap().to_string(),
            "127.0.0.1:8791"
        );
        assert_eq!(parse_listen("8791").unwrap().to_string(), "127.0.0.1:8791");
        // As the port-in-use advice offers it (`:0`, any free port).
        assert_eq!(parse_listen(":0").unwrap().to_string(), "127.0.0.1:0");
        assert_eq!(parse_listen(":8791").unwrap().to_string(), "127.0.0.1:8791");
        assert_eq!(
            parse_listen("[::1]:8791").unwrap().to_string(),
            "[::1]:8791"
        );
        let e = parse_listen("example.com:8791").unwrap_err();
        assert!(e.contains("such as 127.0.0.1:8791"), "{e}");
    }

    #[test]
    fn milliseconds_say_what_they_take() {
        assert_eq!(parse_ms("12.5"), Ok(12.5));
        assert!(parse_ms("abc").unwrap_err().contains("such as 1000"));
        assert!(parse_ms("-1").unwrap_err().contains(">= 0"));
        assert!(parse_ms("inf").is_err());
        assert_eq!(parse_whole_ms("10"), Ok(10));
        assert!(parse_whole_ms("1.5").unwrap_err().contains("whole number"));
    }

    #[test]
    fn a_missing_directory_is_named_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing/r.jsonl");
        let e = std::fs::File::create(&path).unwrap_err();
        let msg = format!("{:#}", create_failed("the records file", &path, e));
        assert!(
            msg.contains(&format!(
                "the directory {} does not exist; create it first (mkdir -p",
                dir.path().join("missing").display()
            )),
            "{msg}"
        );
    }
}
