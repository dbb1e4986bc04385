//! Checks on the text of a JSON document that a parsed `Value` can no longer answer: how deeply
//! it nests (serde_json stops at 128 levels with a message that names no limit) and whether an
//! integer literal fits in 64 bits (serde_json silently turns a larger one into a float, so
//! `123456789012345678901234567890` would be stored as `1.2345678901234568e29`).
//!
//! How many items it holds is counted too (`check_sized`): a parsed value costs tens of bytes
//! whatever its text, so a 15 MiB `[0,0,0,…]` would take over a gigabyte once parsed.
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
    #[error("JSON holding more than {0} items (values and member names)")]
    TooManyItems(usize),
    #[error("a JSON array holding more than {0} elements")]
    ArrayTooLong(usize),
}

/// What `check_sized` allows.
#[derive(Debug, Clone, Copy)]
pub struct TextLimits {
    pub max_depth: usize,
    /// Values and member names in all.
    pub max_items: usize,
    /// Elements of one array.
    pub max_array: usize,
}

/// Refuses `text` when it nests deeper than `max_depth` levels of objects and arrays, or holds
/// an integer literal outside the `i64` range. Other malformations are left to the parser.
pub fn check(text: &[u8], max_depth: usize) -> Result<(), JsonTextError> {
    check_sized(
        text,
        TextLimits {
            max_depth,
            max_items: usize::MAX,
            max_array: usize::MAX,
        },
    )
}

/// `check`, and refuses `text` when it holds more than `limits.max_items` items or an array
/// of more than `limits.max_array` elements.
pub fn check_sized(text: &[u8], limits: TextLimits) -> Result<(), JsonTextError> {
    let max_depth = limits.max_depth;
    // Per open array or object: the elements seen (arrays only count).
    let mut open: Vec<(bool, usize)> = Vec::new();
    let mut items = 0usize;
    let mut item = |open: &mut Vec<(bool, usize)>| -> Result<(), JsonTextError> {
        items += 1;
        if items > limits.max_items {
            return Err(JsonTextError::TooManyItems(limits.max_items));
        }
        if let Some((true, elements)) = open.last_mut() {
            *elements += 1;
            if *elements > limits.max_array {
                return Err(JsonTextError::ArrayTooLong(limits.max_array));
            }
        }
        Ok(())
    };
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                item(&mut open)?;
                // Skip the string, honouring escapes.
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
            }
            c @ (b'{' | b'[') => {
                item(&mut open)?;
                if open.len() >= max_depth {
                    return Err(JsonTextError::TooDeep(max_depth));
                }
                open.push((c == b'[', 0));
            }
            b'}' | b']' => {
                open.pop();
            }
            b't' | b'f' | b'n' => {
                item(&mut open)?;
                while i < text.len() && text[i].is_ascii_alphabetic() {
                    i += 1;
                }
                continue;
            }
            b'-' | b'0'..=b'9' => {
                item(&mut open)?;
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
    fn items_and_array_elements_are_counted_outside_strings() {
        let limits = TextLimits {
            max_depth: 8,
            max_items: 6,
            max_array: 3,
        };
        // {"a": [1, true, "x"]}: the object, the name, the array and its three elements.
        assert!(check_sized(br#"{"a": [1, true, "x"]}"#, limits).is_ok());
        let roomy = TextLimits {
            max_items: 100,
            ..limits
        };
        assert_eq!(
            check_sized(br#"{"a": [1, null, "x", 2]}"#, roomy),
            Err(JsonTextError::ArrayTooLong(3))
        );
        assert_eq!(
            check_sized(br#"{"a": [1, 2], "b": [3]}"#, limits),
            Err(JsonTextError::TooManyItems(6))
        );
        // Nested arrays count as one element of theirs; strings hide their brackets.
        assert!(check_sized(br#"[[1, 2, 3], "[,,,,]", false]"#, limits).is_err());
        assert!(check_sized(br#"[[1, 2], "[,,,,]", false]"#, limits).is_ok());
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
