//! Merge of per-shard scan results on the coordinating node.

use serde_json::Value;

use super::order::RowOrder;

/// Merges each shard's ordered rows, then applies `skip` and `limit` once.
pub fn merge_rows(
    shards: Vec<Vec<Value>>,
    order: &RowOrder,
    skip: usize,
    limit: usize,
) -> Vec<Value> {
    let mut all: Vec<Value> = shards.into_iter().flatten().collect();
    all.sort_by(|a, b| order.compare(a, b));
    all.into_iter().skip(skip).take(limit).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let keys = crate::query::ScanRequest::parse_order("n");
        let order = RowOrder::new(&keys, &crate::query::filter::Filter::All);
        let rows = merge_rows(vec![s1, s2], &order, 1, 2);
        let ns: Vec<_> = rows.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        assert_eq!(ns, [2, 3]);
    }
}
