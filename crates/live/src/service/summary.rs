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

/// The stop's lines on MCP servers that never ran, one each: a server whose wrapper said it
/// could not be started or exited before answering anything (with why), and, under `run`,
/// each server run wrapped (`wrapped`) whose wrapper never reached the relay at all (the host
/// did not start it). Either way the model was offered none of its tools and no record can
/// say so: without these lines a broken server was a silent `0 intervals` (issue 40).
pub fn servers_summary(seen: &crate::ingest::ServersSeen, wrapped: &[String]) -> Vec<String> {
    use crate::ingest::shown_alias;
    let mut lines = Vec::new();
    for (alias, (state, failures)) in &seen.failed {
        let started = seen.started.get(alias).copied().unwrap_or(0);
        let times = if *failures == 1 {
            String::new()
        } else {
            format!(" ({failures} times)")
        };
        lines.push(if started > *failures {
            // A wrapper reports `started` first and then the exit: some other start ran.
            format!(
                "MCP server `{}` exited at start{times}: {state}; it ran in {} other start{}",
                shown_alias(alias),
                started - failures,
                if started - failures == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "MCP server `{}` never ran{times}: {state}. The host got none of its tools, so \
                 no call of it can be in the records; fix its command in the host's MCP \
                 configuration",
                shown_alias(alias)
            )
        });
    }
    for alias in wrapped {
        if !seen.started.contains_key(alias) && !seen.failed.contains_key(alias) {
            lines.push(format!(
                "MCP server `{}` never connected: its wrapper never reached the relay, so the \
                 host did not start it (or could not start `windowtap wrap`); none of its \
                 calls can be in the records",
                shown_alias(alias)
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{ServerState, ServersSeen, SpawnError};

    #[test]
    fn servers_that_never_ran_are_named_with_why() {
        let mut seen = ServersSeen::default();
        seen.started.insert("ok".into(), 1);
        seen.failed.insert(
            "broken".into(),
            (ServerState::SpawnFailed(SpawnError::NotFound), 1),
        );
        let lines = servers_summary(&seen, &["ok".into(), "broken".into(), "silent".into()]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("MCP server `broken` never ran: its command was not found"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("MCP server `silent` never connected"),
            "{lines:?}"
        );
        assert!(servers_summary(&ServersSeen::default(), &[]).is_empty());
    }
}
