//! The change log: what each committed entry did to an object, kept by every replica of the
//! group beside the data, for realtime subscribers (decisions/0024).
//!
//! `statemachine::apply` stages one change per object write (create, update, delete) under the
//! entry's log index (`log::stage`), in the same batch as the write, so a change exists exactly
//! when its write does, on every replica alike, and a snapshot carries it with the data. The log
//! keeps about the last `ClusterSettings::changes_kept` log indexes of each group: the entry whose
//! index is a multiple of `TRIM_EVERY` cuts what is older (`statemachine::change_writes`), the
//! same on every replica — and at most `KEPT_BYTES` of changes, the oldest cut first.
//! `log::read_page` serves the changes after a position; `services::change_tail` follows a group from this
//! node's replica or, when it holds none, from a peer's (`NodeService.WatchChanges`), resuming
//! at the last position it passed on whatever source it moves to: nothing is skipped and
//! nothing repeated.
//!
//! Neighbours: `storage::keys` (the `w` and `v` keys), `statemachine` (writes), `peer_service`
//! (serves peers' tails), `rpc::router` (asks peers); the node follows groups with
//! `Replicas::follow_changes`.

pub mod log;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::object::StoredObject;

/// How many log indexes of changes each group keeps unless the cluster was initialised with
/// another number (`ClusterSettings::changes_kept`, `--change-log-entries`).
pub const KEPT_ENTRIES: u64 = 20 * TRIM_EVERY;

pub(crate) fn default_kept() -> u64 {
    KEPT_ENTRIES
}
/// Every this many log indexes, a group's log of changes is cut back to `KEPT_ENTRIES`.
pub const TRIM_EVERY: u64 = 1024;

/// Most bytes of changes a group keeps, whatever `KEPT_ENTRIES` says: past them, whole
/// stretches of `BYTES_STRETCH` log indexes are cut, the oldest first, down to three quarters
/// of it (a delete's change holds the deleted object: its space must come back).
pub const KEPT_BYTES: u64 = 4 << 20;
/// The log indexes whose changes' bytes are counted together (the byte bound cuts whole
/// stretches, never the one being written).
pub const BYTES_STRETCH: u64 = 16;

const FORMAT_V1: u8 = 1;

/// What a write did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Create,
    Update,
    Delete,
}

impl ChangeKind {
    fn tag(self) -> u8 {
        match self {
            ChangeKind::Create => b'c',
            ChangeKind::Update => b'u',
            ChangeKind::Delete => b'd',
        }
    }

    fn from_tag(tag: u8) -> Option<ChangeKind> {
        match tag {
            b'c' => Some(ChangeKind::Create),
            b'u' => Some(ChangeKind::Update),
            b'd' => Some(ChangeKind::Delete),
            _ => None,
        }
    }
}

/// One committed change of one object, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub group: GroupId,
    /// The log index of the entry that made it: its position in the group.
    pub index: u64,
    pub kind: ChangeKind,
    pub app: String,
    pub class: String,
    pub object_id: String,
    /// The object after the change; for a delete, the object as it was.
    pub object: StoredObject,
    /// For an update, the object before it.
    pub before: Option<StoredObject>,
}

/// A change as `log` stores it: the object's own encoding, and for an update the values its
/// changed fields had (absent ones as `None`) and its old `updated_ms`, from which `decode`
/// rebuilds the object before.
pub(crate) struct ChangeRecord<'a> {
    pub kind: ChangeKind,
    pub app: &'a str,
    pub class: &'a str,
    pub object_id: &'a str,
    pub object: &'a [u8],
    pub before: Option<(i64, OldValues<'a>)>,
}

/// Fields an update changed, with the values they had (`None`: absent).
pub(crate) type OldValues<'a> = Vec<(&'a str, Option<&'a Value>)>;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

impl ChangeRecord<'_> {
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(32 + self.object.len());
        out.push(FORMAT_V1);
        out.push(self.kind.tag());
        for part in [self.app, self.class, self.object_id] {
            put_bytes(&mut out, part.as_bytes());
        }
        put_bytes(&mut out, self.object);
        if let Some((updated_ms, fields)) = &self.before {
            out.extend_from_slice(&updated_ms.to_le_bytes());
            out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
            for (name, value) in fields {
                put_bytes(&mut out, name.as_bytes());
                match value {
                    Some(v) => {
                        out.push(1);
                        put_bytes(&mut out, &serde_json::to_vec(v)?);
                    }
                    None => out.push(0),
                }
            }
        }
        Ok(out)
    }
}

/// The top-level fields whose values differ between `old` and `new`, with their old values.
pub(crate) fn changed_fields<'a>(
    old: &'a Map<String, Value>,
    new: &'a Map<String, Value>,
) -> OldValues<'a> {
    let mut out: Vec<(&str, Option<&Value>)> = old
        .iter()
        .filter(|(k, v)| new.get(k.as_str()) != Some(v))
        .map(|(k, v)| (k.as_str(), Some(v)))
        .collect();
    out.extend(
        new.keys()
            .filter(|k| !old.contains_key(k.as_str()))
            .map(|k| (k.as_str(), None)),
    );
    out
}

/// Reads a stored change.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| Error::Storage("change record cut short".into()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<usize> {
        let b: [u8; 4] = self.take(4)?.try_into().unwrap_or_default();
        Ok(u32::from_le_bytes(b) as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()?;
        self.take(n)
    }

    fn text(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| Error::Storage("change record text is not UTF-8".into()))
    }

    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }
}

impl Change {
    /// Decodes the change at `index` of `group` as `log` stored it.
    pub fn decode(group: GroupId, index: u64, bytes: &[u8]) -> Result<Change> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(1)? != [FORMAT_V1] {
            return Err(Error::Storage("unknown change record format".into()));
        }
        let kind = ChangeKind::from_tag(r.take(1)?[0])
            .ok_or_else(|| Error::Storage("unknown change kind".into()))?;
        let (app, class, object_id) = (r.text()?, r.text()?, r.text()?);
        let object = StoredObject::decode(r.bytes()?)?;
        let before = match r.done() {
            true => None,
            false => {
                let updated: [u8; 8] = r.take(8)?.try_into().unwrap_or_default();
                let mut old = object.clone();
                old.updated_ms = i64::from_le_bytes(updated);
                for _ in 0..r.u32()? {
                    let name = r.text()?;
                    match r.take(1)?[0] {
                        0 => {
                            old.fields.remove(&name);
                        }
                        _ => {
                            old.fields.insert(name, serde_json::from_slice(r.bytes()?)?);
                        }
                    }
                }
                Some(old)
            }
        };
        Ok(Change {
            group,
            index,
            kind,
            app,
            class,
            object_id,
            object,
            before,
        })
    }
}

/// A page of one group's changes after a position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawPage {
    /// Every change up to this position is in this page or an earlier one.
    pub upto: u64,
    /// Some changes after the position asked for are no longer kept; the page holds none.
    pub gap: bool,
    /// The oldest position whose change is still kept.
    pub floor: u64,
    /// (log index, stored change), in log order.
    pub entries: Vec<(u64, Vec<u8>)>,
}

impl RawPage {
    /// The page's changes, decoded.
    pub fn decode(&self, group: GroupId) -> Result<Vec<Change>> {
        self.entries
            .iter()
            .map(|(i, b)| Change::decode(group, *i, b))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn an_update_round_trips_with_the_object_before_it() {
        let mut old = StoredObject::new(10);
        old.fields.insert("a".into(), json!(1));
        old.fields.insert("gone".into(), json!("x"));
        let mut new = old.clone();
        new.updated_ms = 20;
        new.fields.insert("a".into(), json!(2));
        new.fields.remove("gone");
        new.fields.insert("added".into(), json!({"k": [1, 2]}));
        let bytes = new.encode().unwrap();
        let rec = ChangeRecord {
            kind: ChangeKind::Update,
            app: "app",
            class: "C",
            object_id: "id1",
            object: &bytes,
            before: Some((old.updated_ms, changed_fields(&old.fields, &new.fields))),
        };
        let c = Change::decode(GroupId::new(3), 7, &rec.encode().unwrap()).unwrap();
        assert_eq!(c.kind, ChangeKind::Update);
        assert_eq!(
            (c.app.as_str(), c.class.as_str(), c.object_id.as_str()),
            ("app", "C", "id1")
        );
        assert_eq!(c.object, new);
        assert_eq!(c.before, Some(old));
        assert_eq!((c.group, c.index), (GroupId::new(3), 7));
    }

    #[test]
    fn a_cut_record_is_an_error_not_a_panic() {
        let obj = StoredObject::new(1).encode().unwrap();
        let rec = ChangeRecord {
            kind: ChangeKind::Create,
            app: "a",
            class: "C",
            object_id: "x",
            object: &obj,
            before: None,
        };
        let bytes = rec.encode().unwrap();
        for n in 0..bytes.len() {
            assert!(Change::decode(GroupId::new(1), 1, &bytes[..n]).is_err());
        }
        assert!(Change::decode(GroupId::new(1), 1, &bytes).is_ok());
    }
}
