//! Tallies: how many index entries of a declared column each value bucket holds, kept in the
//! same batch as the entries (`statemachine::index_upkeep`), so that counting an indexed range
//! reads a bucket's tally instead of its entries (`shard_exec::exact_count`; decisions/0018).
//!
//! A bucket is the type tag and the next 20 bits of an entry's encoded value
//! (`index::encode`): for a number, the sign, the exponent and the top 8 bits of the
//! mantissa, so 256 buckets per power of two (each 1/256 of it wide); for a string, its
//! first two and a half bytes. Its tally's key is
//! `group · y · app 0 class 0 field 0 · bucket`, its value two u64 LE: `plain`, the entries
//! that count as they are (anyone may read the object, the entry is no array element and its
//! number is held precisely: one entry, one object), and `other`, the bucket's other entries
//! (whose object decides, or whose reader does). A bucket has a tally exactly while it holds
//! entries. Only declared columns' scalar entries are tallied, never markers or latitudes.
//!
//! `split` turns a range of entries into the buckets it covers whole, counted from their
//! tallies, and the runs of entries still to read: the range's two ends and buckets that
//! hold `other` entries.

use std::collections::BTreeMap;

use super::index::{
    after_prefix, imprecise_entry, is_scalar_entry, KeyRange, PUBLIC, TAG_GEO, TYPED,
};
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::storage::keys::{self, SM_TALLY};

/// Bytes of an encoded value that name its bucket, the last of them masked by `LAST_MASK`
/// (a shorter value is its own bucket).
pub const BUCKET_BYTES: usize = 4;
const LAST_MASK: u8 = 0xf0;

/// One bucket's entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Entries that count as they are for any caller holding `*` and for the master key.
    pub plain: u64,
    /// Every other entry of the bucket.
    pub other: u64,
}

impl Tally {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        out.extend_from_slice(&self.plain.to_le_bytes());
        out.extend_from_slice(&self.other.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Tally> {
        let half = |at: usize| -> Result<u64> {
            bytes
                .get(at..at + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| Error::Internal("a stored index tally is damaged".into()))
        };
        if bytes.len() != 16 {
            return Err(Error::Internal("a stored index tally is damaged".into()));
        }
        Ok(Tally {
            plain: half(0)?,
            other: half(8)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.plain == 0 && self.other == 0
    }

    /// Adds the change `(plain, other)`, never past zero.
    pub fn add(&mut self, (plain, other): (i64, i64)) {
        let step = |n: u64, d: i64| match d >= 0 {
            true => n.saturating_add(d.unsigned_abs()),
            false => n.saturating_sub(d.unsigned_abs()),
        };
        self.plain = step(self.plain, plain);
        self.other = step(self.other, other);
    }
}

/// The prefix of one column's tallies.
pub fn field_tally_prefix(group: GroupId, app: &str, class: &str, field: &str) -> Vec<u8> {
    let mut k = class_tally_prefix(group, app, class);
    k.extend_from_slice(field.as_bytes());
    k.push(0);
    k
}

/// The prefix of every tally of a class.
pub fn class_tally_prefix(group: GroupId, app: &str, class: &str) -> Vec<u8> {
    let mut k = keys::sm_family(group, SM_TALLY);
    for part in [app, class] {
        k.extend_from_slice(part.as_bytes());
        k.push(0);
    }
    k
}

/// The encoded value of an entry of the field whose entries start with `prefix_len` bytes.
pub fn entry_value(key: &[u8], prefix_len: usize) -> Option<&[u8]> {
    let (&n, rest) = key.split_last()?;
    let end = rest.len().checked_sub(n as usize)?;
    key.get(prefix_len..end)
}

/// The bucket of an encoded value, `None` for a marker or a latitude (not tallied).
pub fn bucket(value: &[u8]) -> Option<Vec<u8>> {
    is_scalar_entry(value).then(|| bucket_of(value))
}

/// The bucket an encoded value (or a range bound) falls in.
fn bucket_of(value: &[u8]) -> Vec<u8> {
    let mut b = value[..value.len().min(BUCKET_BYTES)].to_vec();
    if b.len() == BUCKET_BYTES {
        b[BUCKET_BYTES - 1] &= LAST_MASK;
    }
    b
}

/// The entries of bucket `bucket` of the column whose entries start with `prefix`, written
/// into `first` and `last` (`[first, last)`).
fn bucket_range(prefix: &[u8], bucket: &[u8], first: &mut Vec<u8>, last: &mut Vec<u8>) {
    first.clear();
    first.extend_from_slice(prefix);
    first.extend_from_slice(bucket);
    last.clear();
    last.extend_from_slice(first);
    match bucket.last() {
        Some(&b) if bucket.len() == BUCKET_BYTES && b < LAST_MASK => {
            if let Some(end) = last.last_mut() {
                *end = b + (!LAST_MASK + 1);
            }
        }
        Some(_) if bucket.len() == BUCKET_BYTES => {
            last.pop();
            *last = after_prefix(last);
        }
        _ => *last = after_prefix(last),
    }
}

/// Whether an entry with `flags` and encoded `value` counts as it is (`Tally::plain`): public,
/// no array element, precise (`TYPED` does not matter to a count).
pub fn plain(flags: &[u8], value: &[u8]) -> bool {
    matches!(flags, [f] if f & !TYPED == PUBLIC) && !imprecise_entry(value)
}

/// The tally changes of one object whose entries go from `before` to `after` (each sorted,
/// keyed by entry key with its flags): per tally key, `(plain, other)` added. Only entries of
/// the `tallied` columns count; unchanged entries cancel out.
pub fn changes(
    group: GroupId,
    app: &str,
    class: &str,
    tallied: &[String],
    before: &[(Vec<u8>, Vec<u8>)],
    after: &[(Vec<u8>, Vec<u8>)],
) -> BTreeMap<Vec<u8>, (i64, i64)> {
    let mut out: BTreeMap<Vec<u8>, (i64, i64)> = BTreeMap::new();
    if tallied.is_empty() {
        return out;
    }
    let columns: Vec<(Vec<u8>, Vec<u8>)> = tallied
        .iter()
        .map(|f| {
            (
                super::index::field_prefix(group, app, class, f),
                field_tally_prefix(group, app, class, f),
            )
        })
        .collect();
    for (entries, sign) in [(before, -1i64), (after, 1i64)] {
        for (key, flags) in entries {
            let Some((prefix, tally_prefix)) = columns.iter().find(|(p, _)| key.starts_with(p))
            else {
                continue;
            };
            let Some(value) = entry_value(key, prefix.len()) else {
                continue;
            };
            let Some(bucket) = bucket(value) else {
                continue;
            };
            let mut tally_key = tally_prefix.clone();
            tally_key.extend_from_slice(&bucket);
            let change = out.entry(tally_key).or_default();
            match plain(flags, value) {
                true => change.0 += sign,
                false => change.1 += sign,
            }
        }
    }
    out.retain(|_, c| *c != (0, 0));
    out
}

/// The range of tallies of the buckets that may hold entries of `range` (entries of the
/// column whose entries start with `prefix`, tallies with `tally_prefix`): `None` when the
/// range may hold markers (they have no tallies), or lies within one bucket (a tally could
/// count none of it).
pub fn tally_range(prefix: &[u8], tally_prefix: &[u8], range: &KeyRange) -> Option<KeyRange> {
    let (start, end) = range;
    let s = start.strip_prefix(prefix)?;
    let e = end.strip_prefix(prefix)?;
    // Within the scalars: no marker and no latitude has a tally.
    if !is_scalar_entry(s) || !(is_scalar_entry(e) || e == [TAG_GEO]) {
        return None;
    }
    let (s, e) = (bucket_of(s), bucket_of(e));
    if s == e {
        return None;
    }
    let with = |part: &[u8]| {
        let mut k = tally_prefix.to_vec();
        k.extend_from_slice(part);
        k
    };
    Some((with(&s), after_prefix(&with(&e))))
}

/// A range of entries as counted tallies and entries to read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// The `plain` entries of the buckets inside the range that hold no other entries.
    pub counted: u64,
    /// The rest of the range, in order: runs that together hold every entry not counted.
    pub read: Vec<KeyRange>,
}

/// Splits `range` (entries of the column whose entries start with `prefix`) by the tallies
/// of its buckets (`buckets`: each bucket with its tally, in order; buckets without a tally
/// hold no entries). Consecutive buckets to read join into one run.
pub fn split(prefix: &[u8], range: &KeyRange, buckets: &[(Vec<u8>, Tally)]) -> Split {
    let (start, end) = range;
    let mut out = Split::default();
    let mut run: Option<KeyRange> = None;
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for (bucket, tally) in buckets {
        bucket_range(prefix, bucket, &mut first, &mut last);
        let lo = first.as_slice().max(start.as_slice());
        let hi = last.as_slice().min(end.as_slice());
        if lo >= hi {
            continue;
        }
        if lo == first && hi == last && tally.other == 0 {
            out.counted += tally.plain;
            out.read.extend(run.take());
            continue;
        }
        match &mut run {
            Some((_, run_end)) => {
                run_end.clear();
                run_end.extend_from_slice(hi);
            }
            None => run = Some((lo.to_vec(), hi.to_vec())),
        }
    }
    out.read.extend(run);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::index::{encode, ELEMENT};
    use serde_json::json;

    const G: GroupId = GroupId::new(1);

    fn range_of(prefix: &[u8], bucket: &[u8]) -> KeyRange {
        let (mut first, mut last) = (Vec::new(), Vec::new());
        bucket_range(prefix, bucket, &mut first, &mut last);
        (first, last)
    }

    fn entry(field: &str, value: &serde_json::Value, id: &str) -> Vec<u8> {
        let mut k = crate::query::index::field_prefix(G, "a", "C", field);
        k.extend_from_slice(&encode(value).unwrap());
        k.extend_from_slice(id.as_bytes());
        k.push(id.len() as u8);
        k
    }

    #[test]
    fn a_tally_round_trips_and_refuses_damage() {
        let t = Tally { plain: 7, other: 3 };
        assert_eq!(Tally::decode(&t.encode()).unwrap(), t);
        for cut in 0..16 {
            assert!(Tally::decode(&t.encode()[..cut]).is_err());
        }
        let mut u = t;
        u.add((-8, 2));
        assert_eq!(u, Tally { plain: 0, other: 5 });
    }

    #[test]
    fn numbers_share_a_bucket_within_a_256th_of_their_power_of_two() {
        let b = |n: f64| bucket(&encode(&json!(n)).unwrap()).unwrap();
        // From 2^18 = 262,144 to 2^19: buckets 1,024 wide.
        assert_eq!(b(300_032.0), b(301_055.0));
        assert_ne!(b(300_032.0), b(301_056.0));
        assert_ne!(b(300_031.0), b(300_032.0));
        // Every entry of a bucket lies in its range, and no other entry does.
        let prefix = crate::query::index::field_prefix(G, "a", "C", "n");
        for n in [0.0, 1.0, 1.5, 300_031.0, 300_032.0, 301_055.0, 1e300, -7.25] {
            let k = entry("n", &json!(n), "o1");
            let (first, last) = range_of(&prefix, &b(n));
            assert!(first <= k && k < last, "{n}");
            let next = entry("n", &json!(n * 1.01 + 1.0), "o1");
            assert!(!(first <= next && next < last), "{n}");
        }
        assert_ne!(b(-5.0), b(5.0));
        assert_eq!(bucket(&encode(&json!(true)).unwrap()).unwrap().len(), 2);
        // Markers and latitudes have none.
        assert_eq!(bucket(&[0x30, 0, 0, 0]), None);
        assert_eq!(bucket(&[0x01]), None);
        assert_eq!(bucket(&[0x02]), None);
    }

    #[test]
    fn changes_count_entries_in_and_out_by_kind() {
        let cols = vec!["n".to_string()];
        let public = vec![PUBLIC];
        let a = (entry("n", &json!(5), "o1"), public.clone());
        let b = (entry("n", &json!(6), "o1"), vec![0]);
        let elem = (entry("n", &json!(6), "o1"), vec![PUBLIC | ELEMENT]);
        let other_col = (entry("m", &json!(6), "o1"), public.clone());
        let one = std::slice::from_ref;
        let c = changes(G, "a", "C", &cols, &[], &[a.clone(), other_col]);
        assert_eq!(c.values().copied().collect::<Vec<_>>(), vec![(1, 0)]);
        // Unchanged entries cancel; a re-flagged one moves between kinds.
        assert!(changes(G, "a", "C", &cols, one(&a), one(&a)).is_empty());
        let c = changes(G, "a", "C", &cols, one(&a), one(&b));
        assert_eq!(
            c.values().copied().collect::<Vec<_>>(),
            vec![(-1, 0), (0, 1)]
        );
        let c = changes(
            G,
            "a",
            "C",
            &cols,
            one(&b),
            &[(b.0.clone(), public.clone())],
        );
        assert_eq!(c.values().copied().collect::<Vec<_>>(), vec![(1, -1)]);
        // An array element is never plain.
        assert!(changes(G, "a", "C", &cols, &[b], &[elem]).is_empty());
        assert!(changes(G, "a", "C", &[], &[], &[a]).is_empty());
    }

    #[test]
    fn a_split_counts_whole_quiet_buckets_and_reads_the_rest_in_runs() {
        let prefix = crate::query::index::field_prefix(G, "a", "C", "n");
        let tp = field_tally_prefix(G, "a", "C", "n");
        let key = |n: f64| {
            let mut k = prefix.clone();
            k.extend_from_slice(&encode(&json!(n)).unwrap());
            k
        };
        let b = |n: f64| bucket(&encode(&json!(n)).unwrap()).unwrap().to_vec();
        let plain = |n| Tally { plain: n, other: 0 };
        let range = (key(1.001), key(12.01));
        // 1, 2, 3, 4, 6, 8, 12 and 14 each have a bucket of their own.
        let buckets = vec![
            (b(1.0), plain(9)),
            (b(2.0), plain(2)),
            (b(3.0), plain(3)),
            (b(4.0), Tally { plain: 1, other: 1 }),
            (b(6.0), plain(6)),
            (b(8.0), plain(8)),
            (b(12.0), plain(12)),
            (b(14.0), plain(14)),
        ];
        let s = split(&prefix, &range, &buckets);
        // 1.001 is in 1's bucket (read from 1.001), 2, 3, 6 and 8 are whole, 4 has other
        // entries, 12's bucket is cut at 12.01, 14 is beyond.
        assert_eq!(s.counted, 2 + 3 + 6 + 8);
        let bucket_key = |n: f64| {
            let mut k = prefix.clone();
            k.extend_from_slice(&b(n));
            k
        };
        assert_eq!(
            s.read,
            vec![
                (key(1.001), range_of(&prefix, &b(1.0)).1),
                range_of(&prefix, &b(4.0)),
                (bucket_key(12.0), key(12.01)),
            ]
        );
        // Within one bucket, or over markers, tallies are not read.
        assert_eq!(tally_range(&prefix, &tp, &(key(300.0), key(300.5))), None);
        let markers = crate::query::index::irregular_range(&prefix);
        assert_eq!(tally_range(&prefix, &tp, &markers), None);
        assert!(tally_range(&prefix, &tp, &range).is_some());
    }
}
