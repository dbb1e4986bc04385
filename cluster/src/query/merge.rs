//! Merge of per-shard scan results on the coordinating node: each shard's rows arrive in the
//! query's order, so a k-way merge takes the page without sorting everything.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use serde_json::Value;

use super::order::RowOrder;

/// One shard's next row in the merge heap (a max-heap: the best row compares greatest).
struct Head<'a> {
    row: Value,
    shard: usize,
    order: &'a RowOrder,
}

impl PartialEq for Head<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head<'_> {}

impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Head<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .order
            .compare(&other.row, &self.row)
            .then_with(|| other.shard.cmp(&self.shard))
    }
}

/// Merges each shard's rows (each already in `order`), then applies `skip` and `limit` once.
pub fn merge_rows(
    shards: Vec<Vec<Value>>,
    order: &RowOrder,
    skip: usize,
    limit: usize,
) -> Vec<Value> {
    let mut rest: Vec<std::vec::IntoIter<Value>> = shards.into_iter().map(Vec::into_iter).collect();
    let mut heap = BinaryHeap::with_capacity(rest.len());
    for (shard, rows) in rest.iter_mut().enumerate() {
        if let Some(row) = rows.next() {
            heap.push(Head { row, shard, order });
        }
    }
    let mut out = Vec::with_capacity(limit.min(1000));
    let mut skipped = 0;
    while out.len() < limit {
        let Some(Head { row, shard, .. }) = heap.pop() else {
            break;
        };
        if let Some(next) = rest[shard].next() {
            heap.push(Head {
                row: next,
                shard,
                order,
            });
        }
        if skipped < skip {
            skipped += 1;
        } else {
            out.push(row);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn order(keys: &str) -> RowOrder {
        let keys = crate::query::ScanRequest::parse_order(keys);
        RowOrder::new(&keys, &crate::query::filter::Filter::All)
    }

    #[test]
    fn merges_shards_in_order_with_skip_and_limit() {
        let s1 = vec![
            json!({"objectId": "a", "n": 1}),
            json!({"objectId": "c", "n": 3}),
        ];
        let s2 = vec![
            json!({"objectId": "b", "n": 2}),
            json!({"objectId": "d", "n": 4}),
        ];
        let rows = merge_rows(vec![s1, s2], &order("n"), 1, 2);
        let ns: Vec<_> = rows.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        assert_eq!(ns, [2, 3]);
    }

    #[test]
    fn a_merge_equals_sorting_every_row() {
        let ord = order("-n,s");
        let mut shards: Vec<Vec<Value>> = Vec::new();
        let mut all = Vec::new();
        for shard in 0..5 {
            let mut rows: Vec<Value> = (0..(shard * 3 + 1))
                .map(|i| json!({"objectId": format!("{shard}-{i}"), "n": (i * 7 + shard) % 4, "s": i % 3}))
                .collect();
            rows.sort_by(|a, b| ord.compare(a, b));
            all.extend(rows.clone());
            shards.push(rows);
        }
        shards.push(Vec::new());
        all.sort_by(|a, b| ord.compare(a, b));
        for (skip, limit) in [(0, 100), (0, 5), (3, 4), (30, 10), (40, 10)] {
            let want: Vec<Value> = all.iter().skip(skip).take(limit).cloned().collect();
            assert_eq!(
                merge_rows(shards.clone(), &ord, skip, limit),
                want,
                "{skip} {limit}"
            );
        }
    }
}
