//! An event's data as JSON text, rendered once and shared by every outbox it waits in, and
//! counted once in the node's realtime bytes for as long as any message holds it.
//! Neighbours: `hub` (renders bodies), `wire` (messages carry one), `outbox` (adds the bodies
//! alive to the bytes its queues hold when it judges the node's budget).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of every body alive on the node.
static ALIVE: AtomicUsize = AtomicUsize::new(0);

/// The counted text itself (freed, and uncounted, with the last `Body` holding it).
#[derive(Debug)]
struct Counted(Box<str>);

impl Drop for Counted {
    fn drop(&mut self) {
        ALIVE.fetch_sub(self.0.len(), Ordering::AcqRel);
    }
}

/// A shared, counted JSON text.
#[derive(Debug, Clone)]
pub struct Body(Arc<Counted>);

impl Body {
    pub fn new(text: String) -> Body {
        let text = text.into_boxed_str();
        ALIVE.fetch_add(text.len(), Ordering::AcqRel);
        Body(Arc::new(Counted(text)))
    }

    pub fn as_str(&self) -> &str {
        &self.0 .0
    }

    pub fn len(&self) -> usize {
        self.0 .0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0 .0.is_empty()
    }
}

/// Bytes of every body alive on the node.
pub fn alive_bytes() -> usize {
    ALIVE.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_counts_once_however_many_hold_it() {
        let before = alive_bytes();
        let a = Body::new("x".repeat(1000));
        let copies: Vec<Body> = (0..10).map(|_| a.clone()).collect();
        // Other tests may render bodies at the same time: only a lower bound holds exactly.
        assert!(alive_bytes() >= before + 1000);
        drop(a);
        assert_eq!(copies[3].as_str().len(), 1000);
        drop(copies);
    }
}
