//! The best `keep` rows a shard offers under a query's order, in bounded memory. Used by the
//! shard loops (`mod`) and the ordered walks (`walk`).

use serde_json::Value;

use crate::query::order::RowOrder;

/// The best `keep` rows offered under an order, in bounded memory: the buffer is cut back
/// to the best `keep` whenever it doubles, and from the first cut on a row that does not
/// beat the worst kept one is turned away with one comparison.
pub(super) struct Best<'o> {
    rows: Vec<Value>,
    pub(super) keep: usize,
    order: &'o RowOrder,
    /// The worst row kept at the last cut.
    worst: Option<Value>,
}

impl<'o> Best<'o> {
    pub(super) fn new(keep: usize, order: &'o RowOrder) -> Best<'o> {
        Best {
            rows: Vec::new(),
            keep,
            order,
            worst: None,
        }
    }

    pub(super) fn offer(&mut self, row: Value) {
        if self.keep == 0
            || self
                .worst
                .as_ref()
                .is_some_and(|w| self.order.compare(&row, w).is_ge())
        {
            return;
        }
        self.rows.push(row);
        if self.rows.len() >= self.keep.saturating_mul(2).max(64) {
            self.rows.sort_by(|a, b| self.order.compare(a, b));
            self.rows.truncate(self.keep);
            self.worst = self.rows.last().cloned();
        }
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(super) fn into_rows(self) -> Vec<Value> {
        self.rows
    }
}
