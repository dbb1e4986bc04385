//! Checks a backup without a cluster (`basalt admin backup verify`): the manifest reads and
//! names every group of its cluster once, and every group's object is there, has the size and
//! SHA-256 the manifest gives, decompresses, and holds a whole state (to its end marker) of
//! the records and index the manifest gives. Each problem names the object.

use super::destination::Destination;
use crate::backup_manifest::{GroupBackup, Manifest, FORMAT, MANIFEST};
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::statemachine::snapshot;

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
    for group in GroupId::all(manifest.settings.shards) {
        match listed.iter().filter(|g| **g == group).count() {
            1 => {}
            0 => problems.push(format!("{MANIFEST}: group {group} is not listed")),
            n => problems.push(format!("{MANIFEST}: group {group} is listed {n} times")),
        }
    }
    for g in &manifest.groups {
        if !GroupId::all(manifest.settings.shards).any(|x| x == g.group) {
            problems.push(format!(
                "{MANIFEST}: group {} is not one of the cluster's",
                g.group
            ));
        }
        if let Err(problem) = check_group(src, g).await {
            problems.push(format!("{}: {problem}", g.object));
        }
    }
    Ok(Report {
        manifest: Some(manifest),
        problems,
    })
}

/// Reads one group's object through, hashing it and decoding its state.
async fn check_group(src: &Destination, g: &GroupBackup) -> std::result::Result<(), String> {
    if g.object != GroupBackup::object_name(g.group) {
        return Err(format!("not the object of group {}", g.group));
    }
    let read = src
        .read_through(&g.object, |r| {
            let mut decoder = zstd::stream::read::Decoder::new(r)?;
            snapshot::read_state(&mut decoder)
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
    let (meta, records) = decoded.map_err(|e| format!("not a whole group state: {e}"))?;
    let applied = meta.last_log_id.map(|l| l.index).unwrap_or(0);
    if records != g.records || applied != g.applied {
        return Err(format!(
            "{records} records at index {applied}, the manifest says {} at {}",
            g.records, g.applied
        ));
    }
    Ok(())
}
