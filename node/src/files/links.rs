//! Signed, expiring urls of stored files, for apps whose files are private (app setting
//! `privateFiles`, issue 15): `?e=<unix seconds>&token=<url-safe base64 HMAC-SHA256>` after a
//! file's url, the HMAC keyed with the app's master key over `<path>?e=<deadline>` (the path
//! being `YYYY/MM/DD/<id>.<ext>`, so a url stays valid whatever `--public-url` the node
//! serving it has). `api::files` hands them out (`POST /2/cdnSignedUrls`) and checks them on
//! downloads.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Longest a signed url may live, in seconds (7 days).
pub const MAX_LIFETIME_SECS: i64 = 7 * 24 * 3600;
/// How long a signed url lives when the request does not say, in seconds.
pub const DEFAULT_LIFETIME_SECS: i64 = 3600;

/// Why a private file's url was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("this file is private: its url needs e and token parameters (POST /2/cdnSignedUrls).")]
    Unsigned,
    #[error("this signed url expired.")]
    Expired,
    #[error("this url's token is not valid for it.")]
    BadToken,
}

/// The HMAC of the file at `path` readable until `deadline` (HMAC takes keys of any length:
/// `BadToken` never comes of it).
fn mac(key: &str, path: &str, deadline: i64) -> Result<Hmac<Sha256>, LinkError> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).map_err(|_| LinkError::BadToken)?;
    mac.update(path.as_bytes());
    mac.update(b"?e=");
    mac.update(deadline.to_string().as_bytes());
    Ok(mac)
}

/// The query that makes the file at `path` readable until `deadline` (unix seconds).
pub fn signed_query(key: &str, path: &str, deadline: i64) -> Result<String, LinkError> {
    let token = URL_SAFE_NO_PAD.encode(mac(key, path, deadline)?.finalize().into_bytes());
    Ok(format!("e={deadline}&token={token}"))
}

/// Checks the `e` and `token` parameters of `query` (a url's raw query string) for the file at
/// `path` at `now` (unix seconds); answers the deadline `e`.
pub fn check(key: &str, path: &str, query: &str, now: i64) -> Result<i64, LinkError> {
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
    };
    let (Some(e), Some(token)) = (param("e"), param("token")) else {
        return Err(LinkError::Unsigned);
    };
    let deadline: i64 = e.parse().map_err(|_| LinkError::BadToken)?;
    let token = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| LinkError::BadToken)?;
    mac(key, path, deadline)?
        .verify_slice(&token)
        .map_err(|_| LinkError::BadToken)?;
    if deadline < now {
        return Err(LinkError::Expired);
    }
    Ok(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "2026/11/24/0123456789abcdef0123456789abcdef.jpg";

    #[test]
    fn a_signed_query_opens_its_file_until_its_deadline() {
        let q = signed_query("master", PATH, 1_000).unwrap_or_default();
        assert_eq!(check("master", PATH, &q, 999), Ok(1_000));
        assert_eq!(check("master", PATH, &q, 1_000), Ok(1_000));
        assert_eq!(
            check("master", PATH, &format!("imageView2/2/w/9&{q}&v=1"), 1_000),
            Ok(1_000)
        );
        assert_eq!(check("master", PATH, &q, 1_001), Err(LinkError::Expired));
    }

    #[test]
    fn anything_else_is_refused() {
        let q = signed_query("master", PATH, 1_000).unwrap_or_default();
        assert_eq!(check("master", PATH, "", 0), Err(LinkError::Unsigned));
        assert_eq!(check("master", PATH, "e=1000", 0), Err(LinkError::Unsigned));
        // Another key, another file, a moved deadline, a damaged token.
        assert_eq!(check("other", PATH, &q, 0), Err(LinkError::BadToken));
        let other_path = PATH.replace("0123", "9999");
        assert_eq!(
            check("master", &other_path, &q, 0),
            Err(LinkError::BadToken)
        );
        let later = q.replace("e=1000", "e=9000");
        assert_eq!(check("master", PATH, &later, 0), Err(LinkError::BadToken));
        let damaged = format!("{}A", q);
        assert_eq!(check("master", PATH, &damaged, 0), Err(LinkError::BadToken));
        assert_eq!(
            check("master", PATH, "e=x&token=abc", 0),
            Err(LinkError::BadToken)
        );
    }
}
