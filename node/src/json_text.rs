//! Checks on the text of a JSON document that a parsed `Value` can no longer answer: how deeply
//! it nests (serde_json stops at 128 levels with a message that names no limit) and whether an
//! integer literal fits in 64 bits (serde_json silently turns a larger one into a float, so
//! `123456789012345678901234567890` would be stored as `1.2345678901234568e29`).
//!
//! Basalt's integers are signed 64-bit: a literal outside `i64` is refused, and `Increment`
//! past the range is refused too (`cluster::statemachine::ops`). Used by `api::context::json_object`
//! for bodies and by the query parameter parsers for `where`/`having`.

/// What is wrong with a JSON text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonTextError {
    #[error("JSON nested more than {0} levels deep")]
    TooDeep(usize),
    #[error("the integer {0} does not fit in a signed 64-bit integer")]
    IntegerOutOfRange(String),
}

/// Refuses `text` when it nests deeper than `max_depth` levels of objects and arrays, or holds
/// an integer literal outside the `i64` range. Other malformations are left to the parser.
pub fn check(text: &[u8], max_depth: usize) -> Result<(), JsonTextError> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                // Skip the string, honouring escapes.
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > max_depth {
                    return Err(JsonTextError::TooDeep(max_depth));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < text.len()
                    && matches!(text[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let token = &text[start..i];
                // Only a well-formed integer literal; anything else is the parser's to refuse.
                let digits = token.strip_prefix(b"-").unwrap_or(token);
                let integer = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
                if integer {
                    let fits = std::str::from_utf8(token)
                        .ok()
                        .is_some_and(|t| t.parse::<i64>().is_ok());
                    if !fits {
                        let shown = String::from_utf8_lossy(token);
                        return Err(JsonTextError::IntegerOutOfRange(
                            basalt_cluster::error::clip(&shown),
                        ));
                    }
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_must_fit_in_i64() {
        assert!(check(
            br#"{"n": 9223372036854775807, "m": -9223372036854775808}"#,
            8
        )
        .is_ok());
        assert_eq!(
            check(br#"{"n": 9223372036854775808}"#, 8),
            Err(JsonTextError::IntegerOutOfRange(
                "9223372036854775808".into()
            ))
        );
        assert!(check(br#"{"n": 123456789012345678901234567890}"#, 8).is_err());
        assert!(check(br#"{"n": 1.5e300, "m": 12345678901234567890.0}"#, 8).is_ok());
        // Malformed numbers are left to the parser; digits inside strings are not numbers.
        assert!(check(b"[1-2, -, 1e999999999999999999999]", 8).is_ok());
        assert!(check(br#"{"s": "123456789012345678901234567890\"9"}"#, 8).is_ok());
    }

    #[test]
    fn depth_is_counted_outside_strings() {
        assert!(check(br#"{"a": [[1]]}"#, 3).is_ok());
        assert_eq!(
            check(br#"{"a": [[[1]]]}"#, 3),
            Err(JsonTextError::TooDeep(3))
        );
        assert!(check(br#"{"a": "[[[[[["}"#, 1).is_ok());
    }
}
