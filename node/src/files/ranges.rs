//! The conditional and partial answers of a download: `If-None-Match` against a file's ETag,
//! and the one byte range of a `Range` header (RFC 9110: `bytes=a-b`, `bytes=a-`, `bytes=-n`;
//! several ranges or another unit get the whole file). Caller: `download`.

use axum::http::{header, HeaderMap};

/// A `Range` that lies wholly outside the file (416).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable;

/// True when the `If-None-Match` of `headers` names `etag` (or `*`).
pub fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

/// The one byte range `bytes=a-b`, `bytes=a-` or `bytes=-n` of a `Range` header, inclusive
/// and cut to `size`. `Ok(None)`: serve the whole file (another unit, several ranges, or a
/// header that is not a range); `Err`: a range that lies wholly outside the file (416).
pub fn byte_range(asked: &str, size: u64) -> Result<Option<(u64, u64)>, Unsatisfiable> {
    let Some(spec) = asked.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let (first, last) = (first.trim(), last.trim());
    let parse = |s: &str| s.parse::<u64>().ok();
    let range = match (first.is_empty(), last.is_empty()) {
        (true, true) => return Ok(None),
        // The last n bytes.
        (true, false) => match parse(last) {
            Some(0) => return Err(Unsatisfiable),
            Some(n) => (size.saturating_sub(n), size.saturating_sub(1)),
            None => return Ok(None),
        },
        (false, _) => {
            let Some(start) = parse(first) else {
                return Ok(None);
            };
            let end = if last.is_empty() {
                Some(u64::MAX)
            } else {
                parse(last)
            };
            match end {
                Some(end) if end >= start => (start, end.min(size.saturating_sub(1))),
                _ => return Ok(None),
            }
        }
    };
    if size == 0 || range.0 >= size {
        return Err(Unsatisfiable);
    }
    Ok(Some(range))
}

#[cfg(test)]
mod tests {
    use super::{byte_range, Unsatisfiable};

    #[test]
    fn byte_ranges() {
        assert_eq!(byte_range("bytes=0-9", 100), Ok(Some((0, 9))));
        assert_eq!(byte_range("bytes=90-", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-10", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-200", 100), Ok(Some((0, 99))));
        assert_eq!(byte_range("bytes=50-500", 100), Ok(Some((50, 99))));
        assert_eq!(byte_range("bytes=100-", 100), Err(Unsatisfiable));
        assert_eq!(byte_range("bytes=-0", 100), Err(Unsatisfiable));
        assert_eq!(byte_range("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(byte_range("bytes=9-3", 100), Ok(None));
        assert_eq!(byte_range("items=0-9", 100), Ok(None));
        assert_eq!(byte_range("bytes=x-9", 100), Ok(None));
    }
}
