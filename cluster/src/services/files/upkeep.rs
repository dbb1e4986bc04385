//! Upkeep of file copies (decisions/0020), run by every node for the data groups it leads:
//! for each file record of the group, the nodes ranked first for it that lack a copy pull one
//! from a node that has it (a new node receives its files; a removed node's files get their
//! copies back), then the copies on other nodes are dropped; copies of deleted files (a
//! `file_gone` record, kept a day) are dropped at once, and copies no record names at all once
//! older than the orphan grace (an upload that failed after its copies were stored). A round
//! that cannot hear from every member or read the records changes nothing of that group.
//! With a bucket (`bucket::Bucket`), the leader of the meta group also lists the bucket once a
//! round and deletes the objects of deleted files, and those it has seen without a record in
//! rounds more than the grace apart.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{rank_among, Files};
use crate::error::Result;
use crate::files::bucket::{unrecorded, Bucket};
use crate::files::record::{FileId, FileRecord};
use crate::files::wire::{CopyRequest, HeldCopy};
use crate::ids::{GroupId, NodeId, META_GROUP};
use crate::namespace::Namespace;

/// The shortest orphan grace: longer than an upload may take from its first durable copy to its
/// committed record (holders finishing, then the record's proposal).
pub const MIN_ORPHAN_GRACE: Duration = Duration::from_secs(120);

/// How often upkeep runs and how old an unrecorded copy must be to be dropped (at least
/// `MIN_ORPHAN_GRACE`).
#[derive(Debug, Clone, Copy)]
pub struct UpkeepTimes {
    pub every: Duration,
    pub orphan_grace: Duration,
}

impl Default for UpkeepTimes {
    fn default() -> Self {
        UpkeepTimes {
            every: Duration::from_secs(300),
            orphan_grace: Duration::from_secs(3600),
        }
    }
}

/// What one round did to one group.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UpkeepReport {
    pub pulled: u64,
    pub pull_failures: u64,
    pub surplus_dropped: u64,
    pub orphans_dropped: u64,
}

/// Runs upkeep every `times.every` until the node shuts down.
pub async fn run(files: Files, times: UpkeepTimes) {
    let mut shutdown = files.replicas.shutdown_signal();
    // Objects of the bucket seen without a record, and when first (`bucket::unrecorded`).
    let mut unrecorded_since = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(times.every) => {}
            _ = shutdown.changed() => return,
        }
        let grace = times.orphan_grace.max(MIN_ORPHAN_GRACE);
        for group in files.replicas.led_groups() {
            if group == META_GROUP {
                if let Some(bucket) = files.bucket() {
                    match files
                        .upkeep_bucket(bucket, grace, &mut unrecorded_since)
                        .await
                    {
                        Ok(0) => {}
                        Ok(deleted) => tracing::info!(deleted, "file upkeep of the bucket"),
                        Err(e) => tracing::debug!("file upkeep of the bucket skipped: {e}"),
                    }
                }
                continue;
            }
            match files.upkeep_group(group, grace).await {
                Ok(report) if report != UpkeepReport::default() => {
                    tracing::info!(%group, ?report, "file upkeep")
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(%group, "file upkeep skipped: {e}"),
            }
        }
    }
}

impl Files {
    /// One round of upkeep for `bucket`: deletes the objects of deleted files and those seen
    /// without a record in rounds more than `grace` apart (`seen` carries that from round to
    /// round); how many it deleted. Lists the bucket before the records (see
    /// `bucket::unrecorded`), and deletes nothing unless every shard's records were read.
    pub async fn upkeep_bucket(
        &self,
        bucket: &Bucket,
        grace: Duration,
        seen: &mut HashMap<FileId, i64>,
    ) -> Result<u64> {
        let listed = bucket.list().await?;
        if listed.is_empty() {
            seen.clear();
            return Ok(0);
        }
        let (mut recorded, mut gone) = (HashSet::new(), HashSet::new());
        for group in self.replicas.slot_map().data_groups() {
            let records = self.replicas.list_records(group, Namespace::File, "");
            recorded.extend(records.await?.into_iter().map(|(k, _)| k));
            let deleted = self.replicas.list_records(group, Namespace::FileGone, "");
            gone.extend(deleted.await?.into_iter().map(|(k, _)| k));
        }
        let now = crate::replicas::now_ms();
        let doomed = unrecorded(
            &listed,
            &recorded,
            &gone,
            now,
            grace.as_millis() as i64,
            seen,
        );
        if doomed.is_empty() {
            return Ok(0);
        }
        let deleted = bucket.delete(&doomed).await?;
        metrics::counter!("basalt_files_dropped_by_upkeep_total").increment(deleted);
        Ok(deleted)
    }

    /// What every active member holds of `group`'s files; fails when one does not answer.
    async fn held_copies(
        &self,
        group: GroupId,
    ) -> Result<HashMap<FileId, Vec<(NodeId, HeldCopy)>>> {
        let me = self.replicas.node_id();
        let shards = self.shards();
        let members: Vec<NodeId> = self.replicas.member_addrs().into_keys().collect();
        let asks = members.iter().map(|&node| async move {
            let held = if node == me {
                self.held_here(group)
            } else {
                let req = CopyRequest::List { group, shards };
                self.replicas
                    .router()
                    .copy_request::<Vec<HeldCopy>>(node, &req, super::ASK_TIMEOUT)
                    .await?
            };
            Ok::<_, crate::error::Error>((node, held))
        });
        let mut out: HashMap<FileId, Vec<(NodeId, HeldCopy)>> = HashMap::new();
        for answer in futures::future::join_all(asks).await {
            let (node, held) = answer?;
            for copy in held {
                out.entry(copy.id.clone()).or_default().push((node, copy));
            }
        }
        Ok(out)
    }

    /// One round of upkeep for the files whose records `group` holds.
    pub async fn upkeep_group(
        &self,
        group: GroupId,
        orphan_grace: Duration,
    ) -> Result<UpkeepReport> {
        // Copies first, records after: a copy listed as older than the grace whose upload
        // succeeded has had its record committed before the records are read.
        let held = self.held_copies(group).await?;
        let listed = self
            .replicas
            .list_records(group, Namespace::File, "")
            .await?;
        // Every key with a record counts as recorded, even one whose value cannot be read: its
        // copies are never taken for orphans.
        let recorded: HashSet<&str> = listed.iter().map(|(k, _)| k.as_str()).collect();
        let records: HashMap<FileId, FileRecord> = listed
            .iter()
            .filter_map(|(key, value)| {
                Some((
                    FileId::parse(key)?,
                    serde_json::from_value(value.clone()).ok()?,
                ))
            })
            .collect();
        let gone: HashSet<String> = self
            .replicas
            .list_records(group, Namespace::FileGone, "")
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let members: Vec<NodeId> = self.replicas.member_addrs().into_keys().collect();
        let wanted = self.wanted(members.len());
        let mut report = UpkeepReport::default();
        for (id, record) in &records {
            if record.bucket.is_some() {
                // In a bucket, not copies: `upkeep_bucket`'s business.
                continue;
            }
            let ranked = rank_among(id, &members);
            let desired: HashSet<NodeId> = ranked.iter().take(wanted).copied().collect();
            let holders: Vec<NodeId> = ranked
                .iter()
                .copied()
                .filter(|n| {
                    held.get(id)
                        .is_some_and(|h| h.iter().any(|(m, c)| m == n && c.size == record.size))
                })
                .collect();
            if holders.is_empty() {
                tracing::warn!(%id, "no member holds a copy of a recorded file");
                continue;
            }
            let mut complete = true;
            for &node in ranked.iter().take(wanted) {
                if holders.contains(&node) {
                    continue;
                }
                match self.pull_on(node, id, record, holders.clone()).await {
                    Ok(()) => report.pulled += 1,
                    Err(e) => {
                        tracing::debug!(%id, %node, "pulling a copy failed: {e}");
                        report.pull_failures += 1;
                        complete = false;
                    }
                }
            }
            if !complete {
                continue;
            }
            for node in holders.iter().filter(|n| !desired.contains(n)) {
                self.drop_copies_of(*node, std::slice::from_ref(id)).await;
                report.surplus_dropped += 1;
            }
        }
        let grace_ms = orphan_grace.as_millis() as i64;
        let mut orphans: HashMap<NodeId, Vec<FileId>> = HashMap::new();
        for (id, copies) in &held {
            if recorded.contains(id.as_str()) {
                continue;
            }
            // A deleted file's copies go at once; others once older than the grace (an upload
            // whose record was never written).
            let deleted = gone.contains(id.as_str());
            for (node, copy) in copies
                .iter()
                .filter(|(_, c)| deleted || c.age_ms > grace_ms)
            {
                orphans.entry(*node).or_default().push(copy.id.clone());
                report.orphans_dropped += 1;
            }
        }
        for (node, ids) in orphans {
            self.drop_copies_of(node, &ids).await;
        }
        metrics::counter!("basalt_files_pulled_by_upkeep_total").increment(report.pulled);
        metrics::counter!("basalt_files_dropped_by_upkeep_total")
            .increment(report.surplus_dropped + report.orphans_dropped);
        Ok(report)
    }
}
