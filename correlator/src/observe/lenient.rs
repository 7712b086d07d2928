//! Lenient readers for optional facts (model name, token usage, stop reason): a value of an
//! unexpected shape reads as absent, never as a reason to lose the stream.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A string, or `None` for anything else (null, a number, an object…).
pub(super) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// A `T`, or `None` when the value does not read as one.
pub(super) fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Counts {
        n: u64,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Outer {
        #[serde(default, deserialize_with = "string")]
        s: Option<String>,
        #[serde(default, deserialize_with = "object")]
        c: Option<Counts>,
    }

    #[test]
    fn the_wrong_shape_is_absent_not_an_error() {
        let read = |j: &str| serde_json::from_str::<Outer>(j).unwrap();
        assert_eq!(
            read(r#"{"s":"m","c":{"n":3}}"#),
            Outer {
                s: Some("m".into()),
                c: Some(Counts { n: 3 })
            }
        );
        assert_eq!(read(r#"{"s":7,"c":{"n":-1}}"#), Outer { s: None, c: None });
        assert_eq!(read(r#"{"s":null,"c":"x"}"#), Outer { s: None, c: None });
        assert_eq!(read("{}"), Outer { s: None, c: None });
    }
}
