//! What counts as this machine, for the warnings about clear text on a network.

/// Whether a URL's host names this machine: `localhost` or a loopback address (brackets of
/// an IPv6 literal allowed).
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
