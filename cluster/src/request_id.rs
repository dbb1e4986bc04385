//! The id of the client request a piece of work serves, carried across nodes so that a
//! forwarded proposal or read logs under the same id on every node: the API layer runs each
//! request inside `scope`; `rpc::router` sends `current()` as gRPC metadata (`x-request-id`)
//! with forwarded proposals and reads; `rpc::node_service` opens a `request` span with it.

use std::future::Future;

/// The gRPC metadata key (and HTTP header) of the id.
pub const METADATA_KEY: &str = "x-request-id";

tokio::task_local! {
    static REQUEST_ID: String;
}

/// Runs `f` as the work of request `id`.
pub async fn scope<F: Future>(id: String, f: F) -> F::Output {
    REQUEST_ID.scope(id, f).await
}

/// The id of the request the current work serves, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Whether `id` is a plain id worth repeating (short, no control or odd characters).
pub fn is_plain(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_id_is_seen_inside_its_scope_only() {
        assert_eq!(current(), None);
        let seen = scope("abc-1".into(), async { current() }).await;
        assert_eq!(seen.as_deref(), Some("abc-1"));
        assert!(is_plain("a.b_c-9") && !is_plain("a b") && !is_plain(""));
    }
}
