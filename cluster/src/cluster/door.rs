//! What the node crate may ask of this node's replicas, through [`Cluster`] (the one door, no
//! `Deref` to `Replicas`): each method forwards to `Replicas`, in groups — writes and routing,
//! object reads, records, metadata read from this node's own replica, quotas and usage, the
//! node's own state, and the change tails realtime follows. Neighbours: `replicas` (does the
//! work), `services::change_tail` (`follow_changes`).

use serde_json::Value;
use tokio::sync::mpsc;

use super::Cluster;
use crate::acl::Principals;
use crate::admin::{NodeRecord, NodeStatus};
use crate::command::{Command, Proposed, QuotaWindow};
use crate::disk::DiskStatus;
use crate::error::Result;
use crate::ids::{GroupId, NodeId};
use crate::names::{AppId, ClassName, ObjectId};
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::services::change_tail::TailEvent;

impl Cluster {
    /// Proposes `cmd` to `group` through its leader and waits until it is applied.
    pub async fn propose(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        self.inner.replicas.propose(group, cmd).await
    }

    /// Proposes an object command to the group that stores the object (`object_group`): as
    /// `propose`, and for the metadata group's classes, which every node reads from its own
    /// replica, answers once every reachable member has applied it, so the next request
    /// through any node sees it.
    pub async fn propose_object(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        self.inner.replicas.propose_object(group, cmd).await
    }

    /// Proposes `cmd` to `group` and answers once every reachable member has applied it (or the
    /// settle timeout passed): for writes that a node's own replica must not miss when it
    /// answers a read alone (`current_stored_object`), such as the end of a session.
    pub async fn propose_settled(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        self.inner.replicas.propose_settled(group, cmd).await
    }

    /// Waits until every node that is a member of `group` in its own view (asked: the active
    /// nodes, and removed ones still in this node's view of the group) has applied `index` or
    /// does not vouch for its replica, or the settle timeout passes (a member that is down or
    /// cut off catches up when it returns; it cannot be told sooner, and it stops vouching for
    /// its replica meanwhile: `freshness`). Answers the members still behind.
    pub async fn settle(&self, group: GroupId, index: u64) -> Vec<NodeId> {
        self.inner.replicas.settle(group, index).await
    }

    /// A new objectId for an object of `class` in `app`: when this node leads some of the
    /// data shards, one that lands on the shard of its create lane (`create_lane`), so that
    /// creating it needs no forward to another node and creates arriving together share one
    /// Raft round; else any (decisions/0025, 0028).
    pub fn new_object_id(&self, app: &AppId, class: &str) -> String {
        self.inner.replicas.new_object_id(app, class)
    }

    /// The group that stores an object (`ids::object_group`).
    pub fn object_group(&self, app: &AppId, class: &str, object_id: &str) -> GroupId {
        self.inner.replicas.object_group(app, class, object_id)
    }

    /// The group holding `app`'s record of `ns` that `key` routes (`SlotMap::record_group`:
    /// claims, nonces, SMS).
    pub fn app_record_group(&self, ns: Namespace, app: &AppId, key: &str) -> GroupId {
        self.inner.replicas.slot_map().record_group(ns, app, key)
    }

    /// The group holding the record of `ns` that `key` routes, for a namespace of no one app
    /// (emailed links, captchas, throttles; `SlotMap::record_group`).
    pub fn record_group(&self, ns: Namespace, key: &str) -> GroupId {
        self.inner.replicas.slot_map().record_group(ns, "", key)
    }

    /// Reads one object, linearizably (no access check: the service's own reads).
    pub async fn get_object(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
    ) -> Result<Option<Value>> {
        self.inner.replicas.get_object(app, class, object_id).await
    }

    /// Reads one object as `principals` would see it: absent when they may not read it.
    pub async fn get_object_as(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
        principals: Principals,
    ) -> Result<Option<Value>> {
        self.inner
            .replicas
            .get_object_as(app, class, object_id, principals)
            .await
    }

    /// Reads one object as stored, internal fields included, linearizably.
    pub async fn get_stored_object(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
    ) -> Result<Option<StoredObject>> {
        self.inner
            .replicas
            .get_stored_object(app, class, object_id)
            .await
    }

    /// An object as stored, from this node's replica when the replica vouches for being current
    /// (`replica_is_current`). `None` when it cannot, or holds no such object: then only the
    /// leader can tell (`get_stored_object`). A write this answer must reflect has to be
    /// proposed with `propose_settled`.
    pub fn current_stored_object(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
    ) -> Option<StoredObject> {
        self.inner
            .replicas
            .current_stored_object(app, class, object_id)
    }

    /// The objects of a class of the metadata group as this node's replica holds them: at
    /// least as new as `meta_applied()` read before the call. The replica may lag the leader;
    /// writes to these classes wait for every member to apply them before they answer
    /// (`settle`).
    pub fn local_meta_objects(
        &self,
        app: &AppId,
        class: &ClassName,
    ) -> Result<Vec<(String, StoredObject)>> {
        self.inner.replicas.local_meta_objects(app, class)
    }

    /// Reads a record of `group` linearizably (absent when expired).
    pub async fn get_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
    ) -> Result<Option<Value>> {
        self.inner.replicas.get_record(group, ns, key).await
    }

    /// Writes a record in `group`, optionally expiring at `expires_at_ms`.
    pub async fn put_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        value: Value,
        expires_at_ms: Option<i64>,
    ) -> Result<Proposed> {
        self.inner
            .replicas
            .put_record(group, ns, key, value, expires_at_ms)
            .await
    }

    /// Writes a record in `group` unless a live record has its key (`Conflict` then).
    pub async fn insert_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        value: Value,
        expires_at_ms: Option<i64>,
    ) -> Result<Proposed> {
        self.inner
            .replicas
            .insert_record(group, ns, key, value, expires_at_ms)
            .await
    }

    /// Compare-and-set of a record of `group` (see `Command::CasRecord`); `Conflict` when the
    /// live value is not `expected`.
    pub async fn cas_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        expected: Option<Value>,
        value: Option<Value>,
    ) -> Result<Proposed> {
        self.inner
            .replicas
            .cas_record(group, ns, key, expected, value)
            .await
    }

    /// Deletes a live record and answers its value: `Ok(None)` when there was none. Each record
    /// is taken at most once, however many callers race for it.
    pub async fn take_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
    ) -> Result<Option<Value>> {
        self.inner.replicas.take_record(group, ns, key).await
    }

    /// Merges `members` into an existing record of `group`; answers the merged value.
    pub async fn merge_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<Value> {
        self.inner
            .replicas
            .merge_record(group, ns, key, members)
            .await
    }

    /// As `merge_record`, for a record of the metadata group that every node reads from its own
    /// replica (app settings): answers once every reachable member has applied the change, so
    /// the next request through any node sees it.
    pub async fn merge_meta_record_everywhere(
        &self,
        ns: Namespace,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<Value> {
        self.inner
            .replicas
            .merge_meta_record_everywhere(ns, key, members)
            .await
    }

    /// Live records of `group`'s namespace `ns` whose keys start with `prefix`, linearizably.
    pub async fn list_records(
        &self,
        group: GroupId,
        ns: Namespace,
        prefix: &str,
    ) -> Result<Vec<(String, Value)>> {
        self.inner.replicas.list_records(group, ns, prefix).await
    }

    /// One record of the metadata group from this node's replica (may lag the leader).
    pub fn local_meta_record(&self, ns: Namespace, key: &str) -> Result<Option<Value>> {
        self.inner.replicas.local_meta_record(ns, key)
    }

    /// Records of a namespace of the metadata group from this node's replica (may lag the
    /// leader slightly; every node keeps one).
    pub fn local_meta_records(&self, ns: Namespace) -> Result<Vec<(String, Value)>> {
        self.inner.replicas.local_meta_records(ns)
    }

    /// As `local_meta_records`, for the keys that start with `prefix` only.
    pub fn local_meta_records_with_prefix(
        &self,
        ns: Namespace,
        prefix: &str,
    ) -> Result<Vec<(String, Value)>> {
        self.inner
            .replicas
            .local_meta_records_with_prefix(ns, prefix)
    }

    /// The last log index of the metadata group this node has applied.
    pub fn meta_applied(&self) -> u64 {
        self.inner.replicas.meta_applied()
    }

    /// Cluster members as this node's metadata replica knows them.
    pub fn local_nodes(&self) -> Vec<NodeRecord> {
        self.inner.replicas.local_nodes()
    }

    /// Counts one use of the quota `ns/key` against every window; `Err(QuotaExceeded)` (and
    /// nothing counted) when a window is full; answers the time the use is stamped with.
    pub async fn take_quota(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        windows: Vec<QuotaWindow>,
    ) -> Result<i64> {
        self.inner
            .replicas
            .take_quota(group, ns, key, windows)
            .await
    }

    /// Gives back the quota use `take_quota` took at `use_ms`.
    pub async fn return_quota(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        use_ms: i64,
    ) -> Result<()> {
        self.inner
            .replicas
            .return_quota(group, ns, key, use_ms)
            .await
    }

    /// What `app` stores in the cluster: the sum of its usage in every group (the metadata
    /// group keeps a few classes), each read linearizably (`usage::AppUsage`).
    pub async fn app_usage(&self, app: &AppId) -> Result<crate::usage::AppUsage> {
        self.inner.replicas.app_usage(app).await
    }

    /// Approximate bytes of this node's RocksDB.
    pub fn storage_bytes(&self) -> u64 {
        self.inner.replicas.storage_bytes()
    }

    /// This node's disk, as last sampled.
    pub fn disk(&self) -> DiskStatus {
        self.inner.replicas.disk()
    }

    /// The active members, as this node's replica of the metadata group holds them.
    pub fn active_members(&self) -> Vec<crate::admin::NodeRecord> {
        self.inner.replicas.active_members()
    }

    /// Takes a backup of the whole cluster to `req.dest`, this node coordinating
    /// (`services::backup`): its manifest.
    pub async fn backup(
        &self,
        req: &crate::admin::BackupRequest,
    ) -> Result<crate::backup_manifest::Manifest> {
        crate::services::backup::take(&self.inner.replicas, &self.inner.backups, req).await
    }

    /// The newest backups in `dest` (a directory or `s3://bucket/prefix`, reached as backups
    /// to it are), newest first.
    pub async fn list_backups(&self, dest: &str) -> Result<Vec<crate::services::backup::Listed>> {
        // A directory not made yet holds no backups (listing it does not make it).
        match crate::services::backup::Destination::open_existing(
            dest,
            self.inner.options.files_bucket.as_ref(),
        )? {
            Some(dest) => crate::services::backup::list(&dest).await,
            None => Ok(Vec::new()),
        }
    }

    /// The cluster's last backup that finished, as this node's replica of the metadata group
    /// holds it.
    pub fn last_backup(&self) -> Option<crate::services::backup::LastBackup> {
        self.inner
            .replicas
            .local_meta_record(
                crate::namespace::Namespace::Cluster,
                crate::services::backup::LAST_BACKUP_KEY,
            )
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value(v).ok())
    }

    /// Removes the backups in `dest` but the newest `keep` (`services::backup::prune`): the
    /// ones removed.
    pub async fn prune_backups(&self, dest: &str, keep: usize) -> Result<Vec<String>> {
        // A directory not made yet holds no backups (listing it does not make it).
        match crate::services::backup::Destination::open_existing(
            dest,
            self.inner.options.files_bucket.as_ref(),
        )? {
            Some(dest) => crate::services::backup::prune(&dest, keep).await,
            None => Ok(Vec::new()),
        }
    }

    /// Checks that every group's replicas hold the same state (`services::check`), this node
    /// coordinating.
    pub async fn check(&self) -> Result<crate::admin::CheckReport> {
        crate::services::check::run(&self.inner.replicas).await
    }

    /// The consistency alarm the last check left, if any (`services::check`).
    pub fn consistency_alarm(&self) -> Option<crate::admin::ConsistencyAlarm> {
        self.inner
            .replicas
            .local_meta_record(
                crate::namespace::Namespace::Cluster,
                crate::admin::CONSISTENCY_KEY,
            )
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value(v).ok())
    }

    /// The state of every group on this node.
    pub fn status(&self) -> NodeStatus {
        self.inner.replicas.status()
    }

    pub fn node_id(&self) -> NodeId {
        self.inner.replicas.node_id()
    }

    /// Whether this node runs the cluster's timed work now: it leads the metadata group.
    pub fn runs_scheduler(&self) -> bool {
        self.inner.replicas.runs_scheduler()
    }

    /// Follows `group`'s changes after `after` (none: from where its sources stand now) until
    /// `tx` closes or the node shuts down; see the module documentation.
    pub async fn follow_changes(
        &self,
        group: GroupId,
        after: Option<u64>,
        tx: mpsc::Sender<TailEvent>,
    ) {
        self.inner.replicas.follow_changes(group, after, tx).await
    }

    pub fn shards(&self) -> u32 {
        self.inner.replicas.shards()
    }

    /// Every group of the cluster by the slot map this node routes by: the metadata group,
    /// the data groups, and the children of splits under way (decisions/0038).
    pub fn known_groups(&self) -> std::collections::BTreeSet<GroupId> {
        self.inner.replicas.slot_map().known_groups()
    }

    /// The slot map this node routes by.
    pub fn slot_map(&self) -> std::sync::Arc<crate::slots::SlotMap> {
        self.inner.replicas.slot_map()
    }
}
