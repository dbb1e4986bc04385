//! Tokens of BQL: identifiers (dot paths, or quoted in backticks), keywords (identifiers
//! compared case-insensitively by the parser), numbers, strings in single or double quotes
//! (backslash escapes), `?` placeholders and punctuation. Each token carries the byte offset
//! where it starts, for error messages.

use super::error::BqlError;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    /// A backtick-quoted identifier: never a keyword.
    Quoted(String),
    Num(f64, bool),
    Str(String),
    Placeholder,
    Punct(&'static str),
    End,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub pos: usize,
}

const PUNCT: [&str; 16] = [
    "<=", ">=", "<>", "!=", "(", ")", "[", "]", ",", "*", "=", "<", ">", "-", "+", "?",
];

pub fn tokenize(src: &str) -> Result<Vec<Token>, BqlError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' || c == b'$' {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'.' | b'$'))
            {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(src[start..i].to_string()),
                pos: start,
            });
        } else if c.is_ascii_digit()
            || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                // An exponent's sign belongs to the number.
                if matches!(bytes[i], b'e' | b'E') && matches!(bytes.get(i + 1), Some(b'-' | b'+'))
                {
                    i += 1;
                }
                i += 1;
            }
            let text = &src[start..i];
            let n: f64 = text
                .parse()
                .map_err(|_| BqlError::new(start, format!("bad number {text:?}")))?;
            let integral = !text.contains(['.', 'e', 'E']);
            out.push(Token {
                tok: Tok::Num(n, integral),
                pos: start,
            });
        } else if c == b'\'' || c == b'"' {
            let (s, next) = string(src, i, c)?;
            out.push(Token {
                tok: Tok::Str(s),
                pos: start,
            });
            i = next;
        } else if c == b'`' {
            let end = src[i + 1..]
                .find('`')
                .ok_or_else(|| BqlError::new(start, "unterminated `identifier`"))?;
            out.push(Token {
                tok: Tok::Quoted(src[i + 1..i + 1 + end].to_string()),
                pos: start,
            });
            i += end + 2;
        } else if let Some(p) = PUNCT.iter().find(|p| src[i..].starts_with(**p)) {
            out.push(Token {
                tok: if *p == "?" {
                    Tok::Placeholder
                } else {
                    Tok::Punct(p)
                },
                pos: start,
            });
            i += p.len();
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(BqlError::new(start, format!("unexpected character {ch:?}")));
        }
    }
    out.push(Token {
        tok: Tok::End,
        pos: src.len(),
    });
    Ok(out)
}

/// A quoted string starting at `start` (the quote); its text and the offset after it.
fn string(src: &str, start: usize, quote: u8) -> Result<(String, usize), BqlError> {
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, ch)) = chars.next() {
        match ch {
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, other)) => out.push(other),
                None => break,
            },
            c if c as u32 == u32::from(quote) => return Ok((out, start + 1 + off + 1)),
            c => out.push(c),
        }
    }
    Err(BqlError::new(start, "unterminated string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_with_positions() {
        let t = tokenize("select a.b, `from` from C where x >= -1.5e3 and s = 'it\\'s' or n <> ?")
            .unwrap();
        let toks: Vec<Tok> = t.iter().map(|t| t.tok.clone()).collect();
        assert_eq!(toks[1], Tok::Ident("a.b".into()));
        assert_eq!(toks[3], Tok::Quoted("from".into()));
        assert!(toks.contains(&Tok::Punct(">=")));
        assert!(toks.contains(&Tok::Num(1500.0, false)));
        assert!(toks.contains(&Tok::Str("it's".into())));
        assert!(toks.contains(&Tok::Punct("<>")));
        assert!(toks.contains(&Tok::Placeholder));
        assert_eq!(t[1].pos, 7);
        assert_eq!(tokenize("x = 'open").unwrap_err().pos, 4);
        assert_eq!(tokenize("x ; y").unwrap_err().pos, 2);
    }
}
