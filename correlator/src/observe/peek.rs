//! A cheap look at the leading `"type"` of a JSON object, so that bulk delta events can be
//! dropped without parsing them (servers put `type` first; anything else falls back to a parse).

/// The value of `"type"` when it is the object's first key and a plain string (no escapes);
/// `None` when that is unclear, and the caller must parse.
pub(crate) fn leading_type(data: &[u8]) -> Option<&str> {
    let mut rest = skip_ws(data).strip_prefix(b"{")?;
    rest = skip_ws(rest).strip_prefix(b"\"type\"")?;
    rest = skip_ws(rest).strip_prefix(b":")?;
    rest = skip_ws(rest).strip_prefix(b"\"")?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    if rest[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()
}

fn skip_ws(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &b[n..]
}

/// The `type` of a JSON object: peeked when it leads, else parsed (ignoring everything else).
pub(crate) fn object_type(data: &[u8]) -> Result<String, serde_json::Error> {
    if let Some(t) = leading_type(data) {
        return Ok(t.to_string());
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_slice::<Typed>(data).map(|t| t.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_type_cases() {
        let cases: &[(&[u8], Option<&str>)] = &[
            (
                br#"{"type":"response.output_text.delta","delta":"x"}"#,
                Some("response.output_text.delta"),
            ),
            (b" {\n \"type\" : \"ping\" }", Some("ping")),
            (br#"{"sequence_number":1,"type":"x"}"#, None),
            (br#"{"type":"a\"b"}"#, None),
            (br#"{"type":1}"#, None),
            (b"", None),
            (br#"{"type":"unterminated"#, None),
        ];
        for (input, want) in cases {
            assert_eq!(
                leading_type(input),
                *want,
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn object_type_parses_when_type_is_not_first() {
        assert_eq!(
            object_type(br#"{"n":[1,{"type":"no"}],"type":"yes"}"#).unwrap(),
            "yes"
        );
        assert!(object_type(b"[1]").is_err());
    }
}
