//! The key layout of Basalt's one RocksDB instance per node. Every key of the Raft and
//! state-machine column families starts with the 4-byte big-endian group id, so one group's
//! keys are one contiguous range (snapshots iterate it, snapshot installs delete it).
//!
//! | column family | key                                      | value                      |
//! |---------------|------------------------------------------|----------------------------|
//! | `raft_log`    | group · index (u64 BE)                   | versioned log entry        |
//! | `raft_meta`   | group · `v`                              | vote                       |
//! |               | group · `c`                              | committed log id           |
//! |               | group · `p`                              | last purged log id         |
//! |               | group · `i`                              | snapshot-install marker    |
//! |               | group · `e`                              | erased after removal (`replicas::erase`) |
//! | `sm`          | group · `a`                              | applied log id, membership |
//! |               | group · `o` · app 0 class 0 objectId     | object                     |
//! |               | group · `r` · ns 0 key                   | record                     |
//! |               | group · `t` · expiry ms (u64 BE) · ns 0 key | (empty): TTL index      |
//! |               | group · `x` · app 0 class 0 field 0 · value · objectId · len | flags: secondary index (`query::index`) |
//! |               | group · `y` · app 0 class 0 field 0 · value bucket | entries per bucket (`query::tally`) |
//! |               | group · `w` · log index (u64 BE)         | object change (`changes`)  |
//! |               | group · `v`                              | oldest change index kept   |
//! |               | group · `b`                              | bytes of the change log (u64 LE) |
//! |               | group · `b` · stretch (u64 BE)           | bytes of its changes (u64 LE) |
//! |               | group · `s`                              | slots frozen for a split (`slots::Frozen`) |
//! |               | group · `h` · slot (u32 BE) · app 0 class 0 objectId | (empty): the slot index (`slots::SlotIndex`) |
//! | `default`     | `node`                                   | this node's identity       |

use crate::ids::GroupId;

pub const CF_RAFT_LOG: &str = "raft_log";
pub const CF_RAFT_META: &str = "raft_meta";
pub const CF_SM: &str = "sm";

pub const META_VOTE: u8 = b'v';
pub const META_COMMITTED: u8 = b'c';
pub const META_PURGED: u8 = b'p';
pub const META_INSTALLING: u8 = b'i';
/// The replica was erased after its removal from the group (`replicas::erase`): it grants no
/// vote until a configuration it holds makes it a voter again.
pub const META_ERASED: u8 = b'e';

pub const SM_APPLIED: u8 = b'a';
pub const SM_OBJECT: u8 = b'o';
pub const SM_RECORD: u8 = b'r';
pub const SM_TTL: u8 = b't';
pub const SM_INDEX: u8 = b'x';
pub const SM_TALLY: u8 = b'y';
pub const SM_CHANGES: u8 = b'w';
pub const SM_CHANGES_FLOOR: u8 = b'v';
pub const SM_CHANGES_BYTES: u8 = b'b';
pub const SM_SPLIT: u8 = b's';
pub const SM_SLOT_INDEX: u8 = b'h';

/// Key of this node's identity in the default column family.
pub const NODE_IDENTITY: &[u8] = b"node";

pub fn group_prefix(group: GroupId) -> [u8; 4] {
    group.get().to_be_bytes()
}

/// The first key after every key of `group`.
pub fn group_end(group: GroupId) -> Vec<u8> {
    match group.get().checked_add(1) {
        Some(next) => next.to_be_bytes().to_vec(),
        None => vec![0xff; 5],
    }
}

pub fn log_key(group: GroupId, index: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&group.get().to_be_bytes());
    k[4..].copy_from_slice(&index.to_be_bytes());
    k
}

pub fn meta_key(group: GroupId, tag: u8) -> [u8; 5] {
    let mut k = [0u8; 5];
    k[..4].copy_from_slice(&group.get().to_be_bytes());
    k[4] = tag;
    k
}

/// Prefix of a family of state-machine keys of one group.
pub fn sm_family(group: GroupId, family: u8) -> Vec<u8> {
    meta_key(group, family).to_vec()
}

fn with_parts(mut k: Vec<u8>, parts: &[&str]) -> Vec<u8> {
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.push(0);
        }
        k.extend_from_slice(p.as_bytes());
    }
    k
}

pub fn object_key(group: GroupId, app: &str, class: &str, object_id: &str) -> Vec<u8> {
    with_parts(sm_family(group, SM_OBJECT), &[app, class, object_id])
}

/// Splits an object's key into (app, class, objectId).
pub fn parse_object_key(k: &[u8]) -> Option<(String, String, String)> {
    if k.get(4) != Some(&SM_OBJECT) {
        return None;
    }
    let rest = std::str::from_utf8(k.get(5..)?).ok()?;
    let mut parts = rest.splitn(3, '\0');
    let (app, class, id) = (parts.next()?, parts.next()?, parts.next()?);
    Some((app.to_string(), class.to_string(), id.to_string()))
}

/// Key of an object's entry in the slot index: the object's key with its family `o` replaced
/// by `h` · slot, so that one slot's objects are one range (`slot_range`).
pub fn slot_entry_key(object_key: &[u8], slot: u32) -> Option<Vec<u8>> {
    if object_key.get(4) != Some(&SM_OBJECT) {
        return None;
    }
    let mut k = Vec::with_capacity(object_key.len() + 4);
    k.extend_from_slice(object_key.get(..4)?);
    k.push(SM_SLOT_INDEX);
    k.extend_from_slice(&slot.to_be_bytes());
    k.extend_from_slice(object_key.get(5..)?);
    Some(k)
}

/// The object key a slot-index entry names.
pub fn object_of_slot_entry(entry: &[u8]) -> Option<Vec<u8>> {
    if entry.get(4) != Some(&SM_SLOT_INDEX) || entry.len() < 9 {
        return None;
    }
    let mut k = Vec::with_capacity(entry.len() - 4);
    k.extend_from_slice(&entry[..4]);
    k.push(SM_OBJECT);
    k.extend_from_slice(&entry[9..]);
    Some(k)
}

/// The slot-index entries of one slot of `group`: `[start, end)`.
pub fn slot_range(group: GroupId, slot: u32) -> (Vec<u8>, Vec<u8>) {
    let at = |s: u64| {
        let mut k = sm_family(group, SM_SLOT_INDEX);
        match u32::try_from(s) {
            Ok(s) => k.extend_from_slice(&s.to_be_bytes()),
            // After the last slot: the next family.
            Err(_) => k = sm_family(group, SM_SLOT_INDEX + 1),
        }
        k
    };
    (at(u64::from(slot)), at(u64::from(slot) + 1))
}

/// The slot a slot-index entry is of.
pub fn slot_of_entry(entry: &[u8]) -> Option<u32> {
    if entry.get(4) != Some(&SM_SLOT_INDEX) {
        return None;
    }
    Some(u32::from_be_bytes(entry.get(5..9)?.try_into().ok()?))
}

/// Key of the slots a group froze for a split (`slots::Frozen`).
pub fn split_key(group: GroupId) -> Vec<u8> {
    sm_family(group, SM_SPLIT)
}

/// Prefix of every object of one class in one group.
pub fn class_prefix(group: GroupId, app: &str, class: &str) -> Vec<u8> {
    let mut k = with_parts(sm_family(group, SM_OBJECT), &[app, class]);
    k.push(0);
    k
}

/// The first key after every key starting with `prefix`, for prefixes that end in the 0
/// separator (class and namespace prefixes): the separator bumped to 1.
pub fn separated_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last = 1;
    }
    end
}

/// Key of the change an entry at `index` made (`changes`).
pub fn change_key(group: GroupId, index: u64) -> Vec<u8> {
    let mut k = sm_family(group, SM_CHANGES);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Key of the `nth` change an entry at `index` made (an entry carrying a batch of commands
/// makes one per object write): the first is `change_key`, the others follow it with `nth` as
/// a u32 BE suffix, so an entry's changes sort together, in order, before the next entry's.
pub fn nth_change_key(group: GroupId, index: u64, nth: u32) -> Vec<u8> {
    let mut k = change_key(group, index);
    if nth > 0 {
        k.extend_from_slice(&nth.to_be_bytes());
    }
    k
}

/// Index of a change key (`change_key`).
pub fn change_index(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.get(5..13)?.try_into().ok()?))
}

pub fn record_key(group: GroupId, ns: &str, key: &str) -> Vec<u8> {
    with_parts(sm_family(group, SM_RECORD), &[ns, key])
}

/// Prefix of every record of a namespace in one group.
pub fn record_ns_prefix(group: GroupId, ns: &str) -> Vec<u8> {
    let mut k = with_parts(sm_family(group, SM_RECORD), &[ns]);
    k.push(0);
    k
}

pub fn ttl_key(group: GroupId, expires_at_ms: i64, ns: &str, key: &str) -> Vec<u8> {
    let mut k = sm_family(group, SM_TTL);
    k.extend_from_slice(&(expires_at_ms.max(0) as u64).to_be_bytes());
    with_parts(k, &[ns, key])
}

/// Splits a TTL index key into (expiry, ns, key).
pub fn parse_ttl_key(k: &[u8]) -> Option<(i64, String, String)> {
    let ms = u64::from_be_bytes(k.get(5..13)?.try_into().ok()?) as i64;
    let rest = std::str::from_utf8(k.get(13..)?).ok()?;
    let (ns, key) = rest.split_once('\0')?;
    Some((ms, ns.to_string(), key.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G1: GroupId = GroupId::new(1);
    const G2: GroupId = GroupId::new(2);

    #[test]
    fn object_keys_parse_back() {
        let k = object_key(G2, "app", "Game", "x1");
        assert_eq!(
            parse_object_key(&k),
            Some(("app".into(), "Game".into(), "x1".into()))
        );
        assert_eq!(parse_object_key(&split_key(G2)), None);
    }

    #[test]
    fn groups_are_contiguous_and_ordered() {
        assert!(log_key(G1, u64::MAX).as_slice() < group_end(G1).as_slice());
        assert!(log_key(G2, 0).as_slice() >= group_end(G1).as_slice());
        assert!(log_key(G1, 9) < log_key(G1, 10));
    }

    #[test]
    fn class_prefix_does_not_match_longer_class_names() {
        let p = class_prefix(G1, "app", "Game");
        assert!(object_key(G1, "app", "Game", "x").starts_with(&p));
        assert!(!object_key(G1, "app", "GameScore", "x").starts_with(&p));
    }

    #[test]
    fn ttl_keys_sort_by_expiry_and_round_trip() {
        let a = ttl_key(G1, 1000, "sms", "k");
        let b = ttl_key(G1, 2000, "a", "b");
        assert!(a < b);
        assert_eq!(parse_ttl_key(&a), Some((1000, "sms".into(), "k".into())));
    }
}
