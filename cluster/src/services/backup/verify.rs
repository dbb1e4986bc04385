//! Checks a backup without a cluster (`basalt admin backup verify`): the manifest reads and
//! names every group of its cluster once, and every group's object is there, has the size and
//! SHA-256 the manifest gives, decompresses, and holds a whole state (to its end marker) of
//! the records and index the manifest gives; the groups listed are those the slot map in the
//! metadata group's state names; every group's listing of stored files is whole and
//! counts what the manifest says, and every file copied into the backup is there with its
//! SHA-256. Each problem names the object. Memory: about 100 bytes per copied file of a group.

use std::collections::BTreeSet;

use futures::StreamExt;

use super::destination::Destination;
use crate::backup_manifest::{BackedUpFile, GroupBackup, GroupFiles, Manifest, FORMAT, MANIFEST};
use crate::error::{Error, Result};
use crate::ids::{GroupId, META_GROUP};
use crate::namespace::Namespace;
use crate::slots::{SlotMap, SLOTS_KEY};
use crate::statemachine::snapshot;
use crate::storage::keys;
use crate::storage::records::StoredRecord;

/// What a check found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// The manifest, when it could be read.
    pub manifest: Option<Manifest>,
    /// One line per problem, each naming its object; none: the backup is whole.
    pub problems: Vec<String>,
}

/// Checks the backup in folder `src`. Fails only when the folder cannot be reached at all.
pub async fn verify(src: &Destination) -> Result<Report> {
    let mut report = read_manifest(src).await?;
    let Some(manifest) = &report.manifest else {
        return Ok(report);
    };
    for g in &manifest.groups {
        match check_group(src, g).await {
            Err(problem) => report.problems.push(format!("{}: {problem}", g.object)),
            Ok(slots) if g.group == META_GROUP => {
                report
                    .problems
                    .extend(check_slot_map(manifest, slots.as_deref()));
            }
            Ok(_) => {}
        }
        if let Some(files) = &g.files {
            report
                .problems
                .extend(check_files(src, g.group, files).await);
        }
    }
    Ok(report)
}

/// Reads the manifest of the backup in `src` and checks that it is complete (its format, every
/// group of its cluster listed once), reading no other object: what a restore checks first
/// (it checks each object as it reads it).
pub async fn read_manifest(src: &Destination) -> Result<Report> {
    let mut problems = Vec::new();
    let manifest = match src.get(MANIFEST).await {
        Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
            Ok(m) => Some(m),
            Err(e) => {
                problems.push(format!("{MANIFEST}: not a whole manifest ({e})"));
                None
            }
        },
        Err(Error::Unavailable(e)) => return Err(Error::Unavailable(e)),
        Err(e) => {
            problems.push(format!("{MANIFEST}: {e}"));
            None
        }
    };
    let Some(manifest) = manifest else {
        return Ok(Report {
            manifest: None,
            problems,
        });
    };
    if manifest.format != FORMAT {
        problems.push(format!(
            "{MANIFEST}: format {} (this build reads {FORMAT})",
            manifest.format
        ));
    }
    let listed: Vec<GroupId> = manifest.groups.iter().map(|g| g.group).collect();
    let expected = manifest.expected_groups();
    let cap = manifest.settings.group_cap();
    for &group in &manifest.split_groups {
        if group.get() <= manifest.settings.shards || group.get() > cap {
            problems.push(format!(
                "{MANIFEST}: group {group} cannot be one a split made (groups {} to {cap})",
                manifest.settings.shards + 1
            ));
        }
    }
    for &group in &expected {
        match listed.iter().filter(|g| **g == group).count() {
            1 => {}
            0 => problems.push(format!("{MANIFEST}: group {group} is not listed")),
            n => problems.push(format!("{MANIFEST}: group {group} is listed {n} times")),
        }
    }
    for g in &manifest.groups {
        if !expected.contains(&g.group) {
            problems.push(format!(
                "{MANIFEST}: group {} is not one of the cluster's",
                g.group
            ));
        }
        if g.object != GroupBackup::object_name(g.group) {
            problems.push(format!("{}: not the object of group {}", g.object, g.group));
        }
    }
    Ok(Report {
        manifest: Some(manifest),
        problems,
    })
}

/// The slot map's record key in the metadata group's state, as a state file holds it.
fn slot_map_key() -> Vec<u8> {
    let key = keys::record_key(META_GROUP, Namespace::Cluster.name(), SLOTS_KEY);
    key.get(4..).map(<[u8]>::to_vec).unwrap_or_default()
}

/// The groups the slot map in the metadata group's state names (its record's stored bytes:
/// none before a first split) against those the manifest lists: a problem for each that
/// differs.
fn check_slot_map(manifest: &Manifest, record: Option<&[u8]>) -> Vec<String> {
    let settings = &manifest.settings;
    let map = match record {
        None => SlotMap::initial(settings.shards),
        Some(bytes) => {
            let value = StoredRecord::decode(bytes).map(|r| r.value);
            match value
                .map_err(|e| e.to_string())
                .and_then(|v| SlotMap::from_record(v, settings.shards, settings.group_cap()))
            {
                Ok(map) => map,
                Err(e) => {
                    return vec![format!(
                        "{}: the slot map does not read ({e})",
                        GroupBackup::object_name(META_GROUP)
                    )]
                }
            }
        }
    };
    let by_map: BTreeSet<GroupId> = std::iter::once(META_GROUP)
        .chain(map.data_groups())
        .collect();
    let listed: BTreeSet<GroupId> = manifest.expected_groups().into_iter().collect();
    let mut problems = Vec::new();
    for g in by_map.difference(&listed) {
        problems.push(format!(
            "{MANIFEST}: group {g} is one of the slot map's (epoch {}) and not backed up",
            map.epoch
        ));
    }
    for g in listed.difference(&by_map) {
        problems.push(format!(
            "{MANIFEST}: group {g} is backed up and not one of the slot map's (epoch {})",
            map.epoch
        ));
    }
    problems
}

/// Reads one group's object through, hashing it and decoding its state: the slot map's
/// record when the group is the metadata group and holds one.
async fn check_group(
    src: &Destination,
    g: &GroupBackup,
) -> std::result::Result<Option<Vec<u8>>, String> {
    let keep = (g.group == META_GROUP).then(slot_map_key);
    let read = src
        .read_through(&g.object, move |r| {
            let mut decoder = zstd::stream::read::Decoder::new(r)?;
            snapshot::read_state(&mut decoder, keep.as_deref())
        })
        .await;
    let (decoded, size, sha256) = match read {
        Ok(read) => read,
        Err(Error::Storage(e)) if e.ends_with("is missing") => return Err("missing".into()),
        Err(e) => return Err(format!("unreadable: {e}")),
    };
    if size != g.size {
        return Err(format!("{size} bytes, the manifest says {}", g.size));
    }
    if sha256 != g.sha256 {
        return Err(format!(
            "SHA-256 {sha256}, the manifest says {} (the object changed)",
            g.sha256
        ));
    }
    let state = decoded.map_err(|e| format!("not a whole group state: {e}"))?;
    let (records, applied) = (
        state.records,
        state.meta.last_log_id.map(|l| l.index).unwrap_or(0),
    );
    if records != g.records || applied != g.applied {
        return Err(format!(
            "{records} records at index {applied}, the manifest says {} at {}",
            g.records, g.applied
        ));
    }
    Ok(state.kept)
}

/// Files of a backup checked at a time.
const CHECKING: usize = 8;

/// Reads a group's listing of stored files through, then every file it says the backup holds:
/// the problems found, each naming its object.
async fn check_files(src: &Destination, group: GroupId, files: &GroupFiles) -> Vec<String> {
    let name = &files.object;
    if *name != GroupFiles::object_name(group) {
        return vec![format!("{name}: not the listing of group {group}")];
    }
    let read = src
        .read_through(name, |r| {
            use std::io::BufRead;
            let mut copied = Vec::new();
            let (mut n, mut bytes, mut in_bucket, mut missing) = (0u64, 0u64, 0u64, 0u64);
            for line in std::io::BufReader::new(r).lines() {
                let entry: BackedUpFile = serde_json::from_str(&line?)?;
                n += 1;
                bytes += entry.size;
                match (entry.sha256, entry.bucket, entry.missing) {
                    (Some(sha256), _, _) => copied.push((entry.id, entry.size, sha256)),
                    (_, Some(_), _) => in_bucket += 1,
                    _ => missing += 1,
                }
            }
            Ok::<_, Error>((n, bytes, in_bucket, missing, copied))
        })
        .await;
    let (parsed, size, sha256) = match read {
        Ok(read) => read,
        Err(Error::Storage(e)) if e.ends_with("is missing") => {
            return vec![format!("{name}: missing")]
        }
        Err(e) => return vec![format!("{name}: unreadable: {e}")],
    };
    if size != files.size || sha256 != files.sha256 {
        return vec![format!(
            "{name}: {size} bytes with SHA-256 {sha256}, the manifest says {} with {} (the object changed)",
            files.size, files.sha256
        )];
    }
    let (n, bytes, in_bucket, missing, copied) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return vec![format!("{name}: not a whole listing: {e}")],
    };
    let counted = (n, bytes, copied.len() as u64, in_bucket, missing);
    let said = (
        files.files,
        files.bytes,
        files.copied,
        files.in_bucket,
        files.missing,
    );
    if counted != said {
        return vec![format!(
            "{name}: lists (files, bytes, copied, in a bucket, missing) {counted:?}, the manifest says {said:?}"
        )];
    }
    futures::stream::iter(copied)
        .map(|(id, size, sha256)| async move {
            let object = BackedUpFile::object_name(&id);
            match src.read_through(&object, |_| ()).await {
                Ok((_, got, _)) if got != size => {
                    Some(format!("{object}: {got} bytes, the listing says {size}"))
                }
                Ok((_, _, got)) if got != sha256 => Some(format!(
                    "{object}: SHA-256 {got}, the listing says {sha256} (the object changed)"
                )),
                Ok(_) => None,
                Err(Error::Storage(e)) if e.ends_with("is missing") => {
                    Some(format!("{object}: missing"))
                }
                Err(e) => Some(format!("{object}: unreadable: {e}")),
            }
        })
        .buffer_unordered(CHECKING)
        .filter_map(|p| async move { p })
        .collect()
        .await
}
