//! What the stop says of the exchanges that failed.

/// What each failure word means for a person looking at the summary.
fn failure_hint(word: &str) -> &'static str {
    match word {
        "refused" => "nothing accepts connections there",
        "dns" => "its host name could not be resolved: no network, or a mistyped URL",
        "tls" => "the TLS handshake failed (a private CA needs --upstream-ca)",
        "timeout" => "it did not answer in time",
        "reset" => "it closed the connection before a complete response",
        _ => "the request to it failed",
    }
}

/// The stop's line on failed exchanges, or `None` when none failed: how many, by mount and
/// failure word, where that mount goes (scheme, host and port only: a base URL's path or
/// userinfo may hold a credential) and what the word means. Upstream failures (the host got
/// the relay's 502/504) come first; streams that broke off mid-way are said apart, since either
/// side may have ended them (a turn the user cancelled does). Without it an unreachable
/// upstream showed only in the log.
pub fn failures_summary(
    mounts: &relay::Mounts,
    failed: &[(String, &'static str, u64)],
) -> Option<String> {
    let part = |(mount, word, n): &(String, &'static str, u64)| {
        let to = mounts
            .get(mount)
            .map(|m| {
                let auth = m.authority.as_str();
                let host = auth.rsplit('@').next().unwrap_or(auth);
                format!(" ({}://{host}: {})", m.scheme, failure_hint(word))
            })
            .unwrap_or_default();
        format!("{word} {n} on /{mount}{to}")
    };
    let (broken, upstream): (Vec<_>, Vec<_>) = failed.iter().partition(|f| f.1 == "broken");
    let count = |v: &[&(String, &'static str, u64)]| v.iter().map(|f| f.2).sum::<u64>();
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let mut says = Vec::new();
    let n = count(&upstream);
    if n > 0 {
        let parts: Vec<String> = upstream.iter().map(|f| part(f)).collect();
        says.push(format!(
            "{n} exchange{} failed upstream, so the host got the relay's 502/504 answer instead \
             of the model's: {}",
            plural(n),
            parts.join("; ")
        ));
    }
    let n = count(&broken);
    if n > 0 {
        let mounts: Vec<String> = broken
            .iter()
            .map(|f| format!("{} on /{}", f.2, f.0))
            .collect();
        says.push(format!(
            "{n} stream{} broke off mid-way ({}; either side may have ended it, as a cancelled \
             turn does)",
            plural(n),
            mounts.join(", ")
        ));
    }
    if says.is_empty() {
        return None;
    }
    Some(format!(
        "{}; each is a line with failure= in the log",
        says.join(". ")
    ))
}
