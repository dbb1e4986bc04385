//! How stored files are served so they cannot attack the app's own users (decisions/0031):
//! every answer says `X-Content-Type-Options: nosniff` (a browser never guesses a type that
//! runs), and a file of an active type — one a browser renders as a page or runs scripts in
//! (HTML, XHTML, SVG, XML, JavaScript, PDF) — is an attachment with
//! `Content-Security-Policy: sandbox` unless the request came to the files' own origin
//! (`--files-public-url` on another host), where the page can reach nothing of the API's.
//! Caller: `download`.

use axum::http::header::{
    CONTENT_DISPOSITION, CONTENT_SECURITY_POLICY, HOST, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::response::Builder;
use axum::http::HeaderMap;

/// Whether a content type is one a browser may render as a page or run.
pub fn is_active(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    matches!(
        essence.as_str(),
        "text/html"
            | "application/xhtml+xml"
            | "image/svg+xml"
            | "text/xml"
            | "application/xml"
            | "text/xsl"
            | "application/xslt+xml"
            | "text/javascript"
            | "application/javascript"
            | "application/ecmascript"
            | "text/ecmascript"
            | "application/x-javascript"
            | "application/pdf"
            | "application/x-shockwave-flash"
            | "multipart/x-mixed-replace"
    ) || essence.ends_with("+xml")
}

/// Whether the request reached the files' own origin (its `Host` is that url's host).
pub fn on_files_origin(origin: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(origin) = origin.and_then(|o| url::Url::parse(o).ok()) else {
        return false;
    };
    let Some(host) = origin.host_str() else {
        return false;
    };
    let want = match origin.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|sent| sent.eq_ignore_ascii_case(&want))
}

/// Adds the headers every file answer carries, and for an active type off the files' own
/// origin the attachment and sandbox headers, naming the file `name`.
pub fn guard(resp: Builder, content_type: &str, own_origin: bool, name: &str) -> Builder {
    let resp = resp.header(X_CONTENT_TYPE_OPTIONS, "nosniff");
    if own_origin || !is_active(content_type) {
        return resp;
    }
    // The name is the stored file's `<id>.<ext>`: letters, digits and a dot only.
    let safe: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-' || *c == '_')
        .collect();
    resp.header(
        CONTENT_DISPOSITION,
        format!("attachment; filename=\"{safe}\""),
    )
    .header(CONTENT_SECURITY_POLICY, "sandbox")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_scripts_are_active_pictures_and_text_are_not() {
        for t in [
            "text/html",
            "text/html; charset=utf-8",
            "image/svg+xml",
            "application/xhtml+xml",
            "application/pdf",
            "application/atom+xml",
            "text/javascript",
        ] {
            assert!(is_active(t), "{t}");
        }
        for t in [
            "image/png",
            "text/plain",
            "application/json",
            "video/mp4",
            "application/octet-stream",
            "text/css",
        ] {
            assert!(!is_active(t), "{t}");
        }
    }

    #[test]
    fn only_the_files_host_is_their_origin() {
        let mut h = HeaderMap::new();
        h.insert(HOST, "files.example.com".parse().expect("host"));
        assert!(on_files_origin(Some("https://files.example.com"), &h));
        assert!(!on_files_origin(Some("https://files.example.com:8443"), &h));
        assert!(!on_files_origin(None, &h));
        h.insert(HOST, "api.example.com".parse().expect("host"));
        assert!(!on_files_origin(Some("https://files.example.com"), &h));
    }
}
