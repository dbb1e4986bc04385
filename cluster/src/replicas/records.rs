//! Objects and records read and written through the group that owns them: the typed facade over
//! `propose` and `read` that the node's features use (sessions, codes, quotas, app settings,
//! the service's own object reads). Each is one command or one read; what a command does is
//! `statemachine::apply`'s, what a read serves is `local_read`'s.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{now_ms, unexpected, Replicas};
use crate::acl::Principals;
use crate::command::{Command, CommandResult, Proposed, QuotaWindow, ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{GroupId, META_GROUP};
use crate::names::{AppId, ClassName, ObjectId};
use crate::namespace::Namespace;
use crate::object::StoredObject;

/// How long a write its group refused `Moved` (its slot went to a split's child) waits for the
/// map that names the child, before the refusal is answered.
const MOVED_WAIT: Duration = Duration::from_secs(10);

/// How often a write refused `Moved` looks for that map.
const MOVED_POLL: Duration = Duration::from_millis(50);

impl Replicas {
    /// Proposes an object command to the group that stores the object (`object_group`): as
    /// `propose`, and for the metadata group's classes, which every node reads from its own
    /// replica, answers once every reachable member has applied it, so the next request
    /// through any node sees it. A write its group refuses `Moved` (a split or merge moved
    /// its slot) is sent again to the group the newer map names (`MOVED_WAIT` at most).
    /// A batch's writes refused `Moved` are sent again one by one, in the batch's order.
    pub async fn propose_object(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        // Kept for every object write (a clone costs far less than its Raft round): a node
        // that has not taken up a split or merge just begun still routes by the map before
        // it, and a merge's source freezes its slots in the round it begins.
        let again = (cmd.written_object().is_some() || matches!(cmd, Command::Batch(_)))
            .then(|| cmd.clone());
        // A refusal arrives as an error (`answer_of`): a write refused `Moved` certainly was
        // not applied. A batch answers each of its writes: those refused `Moved` are in it.
        let p = match (self.propose(group, cmd).await, again) {
            (Err(Error::Moved { epoch }), Some(cmd)) => {
                return self.propose_moved(cmd, group, epoch).await;
            }
            (outcome, Some(Command::Batch(cmds))) => {
                let mut p = outcome?;
                if let CommandResult::Batch(results) = &mut p.result {
                    for (cmd, result) in cmds.into_iter().zip(results.iter_mut()) {
                        if let CommandResult::Rejected(Error::Moved { epoch }) = *result {
                            *result = match self.propose_moved(cmd, group, epoch).await {
                                Ok(again) => again.result,
                                Err(e) => CommandResult::Rejected(e),
                            };
                        }
                    }
                }
                p
            }
            (outcome, _) => outcome?,
        };
        if group == META_GROUP {
            self.settle(META_GROUP, p.log_index).await;
        }
        Ok(p)
    }

    /// Sends a write that `refused` answered `Moved{epoch}` again, once this node's map routes
    /// its object to another group, until a group takes it or `MOVED_WAIT` has passed.
    async fn propose_moved(&self, cmd: Command, refused: GroupId, epoch: u64) -> Result<Proposed> {
        let deadline = Instant::now() + MOVED_WAIT;
        let Some((app, class, object_id)) = cmd.written_object() else {
            return Err(Error::Moved { epoch });
        };
        let (mut refused, mut epoch) = (refused, epoch);
        loop {
            let group = self
                .moved_object_group((app, class, object_id), refused, epoch, deadline)
                .await?;
            match self.propose(group, cmd.clone()).await {
                // Moved again (the child split in turn): by a newer map still.
                Err(Error::Moved { epoch: next }) if Instant::now() < deadline => {
                    (refused, epoch) = (group, next);
                }
                outcome => return outcome,
            }
        }
    }

    /// The group this node's map routes an object to once it is not `refused`, which answered
    /// `Moved{epoch}` for it (or is `refused` again, a moment later, once the map is of
    /// `epoch` or newer): the map is taken up again until then, or `deadline` passes (`Moved`
    /// then).
    async fn moved_object_group(
        &self,
        (app, class, object_id): (&AppId, &str, &str),
        refused: GroupId,
        epoch: u64,
        deadline: Instant,
    ) -> Result<GroupId> {
        loop {
            let group = self.object_group(app, class, object_id);
            // A merge's target refuses writes to the slots it takes in until it adopts them,
            // just after the map names it for them: its own refusal is tried again then.
            if group != refused || self.slot_map().epoch >= epoch {
                if group == refused {
                    tokio::time::sleep(MOVED_POLL).await;
                }
                return Ok(group);
            }
            if Instant::now() >= deadline {
                return Err(Error::Moved { epoch });
            }
            if let Err(e) = self.refresh_slot_map() {
                tracing::warn!("{e}");
            }
            tokio::time::sleep(MOVED_POLL).await;
        }
    }

    /// `read` (a bulk read by the slot map this node routes by), again by each newer map while
    /// a group refuses it `Moved` (a split switched its slots meanwhile, decisions/0038), for
    /// `MOVED_WAIT` in all: several of a split's batches may switch during one long read.
    pub async fn by_newest_map<T, F, Fut>(&self, read: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + MOVED_WAIT;
        retry_moved(deadline, read, |epoch| self.wait_slot_map(epoch, deadline)).await
    }

    /// Waits (until `deadline`) until this node routes by a slot map of `epoch` or newer:
    /// whether it does.
    async fn wait_slot_map(&self, epoch: u64, deadline: Instant) -> bool {
        loop {
            if self.inner.slot_map.load().epoch >= epoch {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if let Err(e) = self.refresh_slot_map() {
                tracing::warn!("{e}");
            }
            tokio::time::sleep(MOVED_POLL).await;
        }
    }

    /// Reads an object from the group that stores it; a group that gave the object's slot to
    /// a split's child answers `Moved`, and the read goes to the group a newer map names
    /// (`MOVED_WAIT` at most).
    async fn read_object(
        &self,
        (app, class, object_id): (&AppId, &str, &str),
        req: ReadRequest,
    ) -> Result<ReadResponse> {
        let deadline = Instant::now() + MOVED_WAIT;
        let mut group = self.object_group(app, class, object_id);
        loop {
            match self.read(group, req.clone()).await {
                Err(Error::Moved { epoch }) => {
                    group = self
                        .moved_object_group((app, class, object_id), group, epoch, deadline)
                        .await?;
                }
                other => return other,
            }
        }
    }

    /// Proposes `cmd` to `group` and answers once every reachable member has applied it (or the
    /// settle timeout passed): for writes that a node's own replica must not miss when it
    /// answers a read alone (`current_stored_object`), such as the end of a session.
    pub async fn propose_settled(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        let p = self.propose(group, cmd).await?;
        self.settle(group, p.log_index).await;
        Ok(p)
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
        let (group, req) = self.stored_object_read(app, class, object_id);
        if !self.replica_is_current(group) {
            return None;
        }
        match self.stale_read(group, &req) {
            Ok(ReadResponse::Stored(o)) => o,
            _ => None,
        }
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
        let req = ReadRequest::ScanStoredObjects {
            app: app.clone(),
            class: class.clone(),
        };
        match self.stale_read(META_GROUP, &req)? {
            ReadResponse::StoredObjects(objs) => Ok(objs),
            other => Err(unexpected(other)),
        }
    }

    /// Reads one object, linearizably (no access check: the service's own reads).
    pub async fn get_object(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
    ) -> Result<Option<Value>> {
        self.get_object_as(app, class, object_id, Principals::master())
            .await
    }

    /// Reads one object as `principals` would see it: absent when they may not read it.
    pub async fn get_object_as(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
        principals: Principals,
    ) -> Result<Option<Value>> {
        let req = ReadRequest::GetObject {
            app: app.clone(),
            class: class.clone(),
            object_id: object_id.clone(),
            principals,
        };
        match self
            .read_object((app, class.as_str(), object_id.as_str()), req)
            .await?
        {
            ReadResponse::Object(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }

    /// Reads one object as stored, internal fields included, linearizably.
    pub async fn get_stored_object(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
    ) -> Result<Option<StoredObject>> {
        let (_, req) = self.stored_object_read(app, class, object_id);
        match self
            .read_object((app, class.as_str(), object_id.as_str()), req)
            .await?
        {
            ReadResponse::Stored(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }

    /// The read of one object as stored, and the group that serves it.
    fn stored_object_read(
        &self,
        app: &AppId,
        class: &ClassName,
        object_id: &ObjectId,
    ) -> (GroupId, ReadRequest) {
        let req = ReadRequest::GetStoredObject {
            app: app.clone(),
            class: class.clone(),
            object_id: object_id.clone(),
        };
        (self.object_group(app, class, object_id), req)
    }

    /// Every object of a class as stored, from every shard (for small system classes).
    pub async fn scan_stored_objects(
        &self,
        app: &AppId,
        class: &ClassName,
    ) -> Result<Vec<(String, StoredObject)>> {
        self.by_newest_map(|| self.scan_stored_objects_once(app, class))
            .await
    }

    /// `scan_stored_objects` by the map this node routes by now.
    async fn scan_stored_objects_once(
        &self,
        app: &AppId,
        class: &ClassName,
    ) -> Result<Vec<(String, StoredObject)>> {
        let (epoch, groups) = self.class_groups_at(class);
        let req = ReadRequest::ScanStoredObjects {
            app: app.clone(),
            class: class.clone(),
        }
        .at_epoch(epoch);
        let reads = groups.into_iter().map(|g| self.read(g, req.clone()));
        let mut out = Vec::new();
        for r in futures::future::join_all(reads).await {
            match r? {
                ReadResponse::StoredObjects(objs) => out.extend(objs),
                other => return Err(unexpected(other)),
            }
        }
        Ok(out)
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
        self.propose(
            group,
            Command::CasRecord {
                ns: ns.name().into(),
                key: key.into(),
                expected,
                value,
                now_ms: now_ms(),
            },
        )
        .await
    }

    /// Changes a record of the metadata group by compare-and-set against its value as the
    /// group's leader holds it: `next` is given that value and answers what to write (`None`:
    /// nothing, it is as wanted), tried again when another write came first — `tries` times,
    /// then `Conflict`. What was written (or found as wanted) is answered.
    pub async fn update_meta_record(
        &self,
        ns: Namespace,
        key: &str,
        tries: usize,
        mut next: impl FnMut(Option<&Value>) -> Result<Option<Value>>,
    ) -> Result<Option<Value>> {
        for _ in 0..tries {
            let raw = self.get_record(META_GROUP, ns, key).await?;
            let Some(value) = next(raw.as_ref())? else {
                return Ok(raw);
            };
            match self
                .cas_record(META_GROUP, ns, key, raw, Some(value.clone()))
                .await
            {
                Ok(_) => return Ok(Some(value)),
                Err(Error::Conflict(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Conflict(format!(
            "the record {}/{key} kept changing: try again",
            ns.name()
        )))
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
        self.propose(
            group,
            Command::PutRecord {
                ns: ns.name().into(),
                key: key.into(),
                value,
                expires_at_ms,
            },
        )
        .await
    }

    /// Reads a record of `group` linearizably (absent when expired).
    pub async fn get_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
    ) -> Result<Option<Value>> {
        match self
            .read(
                group,
                ReadRequest::GetRecord {
                    ns: ns.name().into(),
                    key: key.into(),
                },
            )
            .await?
        {
            ReadResponse::Record(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// What `app` stores in the cluster: the sum of its usage in every group (the metadata
    /// group keeps a few classes), each read linearizably (`usage::AppUsage`).
    pub async fn app_usage(&self, app: &AppId) -> Result<crate::usage::AppUsage> {
        let reads = self
            .group_ids()
            .into_iter()
            .map(|group| self.get_record(group, Namespace::Usage, app));
        let mut total = crate::usage::AppUsage::default();
        for value in futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
        {
            let usage: crate::usage::AppUsage = serde_json::from_value(value)
                .map_err(|e| Error::Internal(format!("a usage record: {e}")))?;
            total = total.plus(usage);
        }
        Ok(total)
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
        self.propose(
            group,
            Command::InsertRecord {
                ns: ns.name().into(),
                key: key.into(),
                value,
                expires_at_ms,
                now_ms: now_ms(),
            },
        )
        .await
    }

    /// Merges `members` into an existing record of `group`; answers the merged value.
    pub async fn merge_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<Value> {
        Ok(self.merge_record_at(group, ns, key, members).await?.0)
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
        let (value, index) = self.merge_record_at(META_GROUP, ns, key, members).await?;
        self.settle(META_GROUP, index).await;
        Ok(value)
    }

    async fn merge_record_at(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<(Value, u64)> {
        let p = self
            .propose(
                group,
                Command::MergeRecord {
                    ns: ns.name().into(),
                    key: key.into(),
                    members,
                },
            )
            .await?;
        match p.result {
            CommandResult::Record(v) => Ok((v, p.log_index)),
            other => Err(Error::Internal(format!(
                "unexpected merge result {other:?}"
            ))),
        }
    }

    /// Deletes a live record and answers its value: `Ok(None)` when there was none. Each record
    /// is taken at most once, however many callers race for it.
    pub async fn take_record(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
    ) -> Result<Option<Value>> {
        let cmd = Command::TakeRecord {
            ns: ns.name().into(),
            key: key.into(),
            now_ms: now_ms(),
        };
        match self.propose(group, cmd).await {
            Ok(p) => match p.result {
                CommandResult::Record(v) => Ok(Some(v)),
                other => Err(Error::Internal(format!("unexpected take result {other:?}"))),
            },
            Err(Error::ObjectNotFound) => Ok(None),
            Err(e) => Err(e),
        }
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
        let now = now_ms();
        let cmd = Command::TakeQuota {
            ns: ns.name().into(),
            key: key.into(),
            now_ms: now,
            windows,
        };
        self.propose(group, cmd).await.map(|_| now)
    }

    /// Gives back the quota use `take_quota` took at `use_ms`.
    pub async fn return_quota(
        &self,
        group: GroupId,
        ns: Namespace,
        key: &str,
        use_ms: i64,
    ) -> Result<()> {
        let cmd = Command::ReturnQuota {
            ns: ns.name().into(),
            key: key.into(),
            use_ms,
        };
        self.propose(group, cmd).await.map(|_| ())
    }

    /// Live records of `group`'s namespace `ns` whose keys start with `prefix`, linearizably.
    pub async fn list_records(
        &self,
        group: GroupId,
        ns: Namespace,
        prefix: &str,
    ) -> Result<Vec<(String, Value)>> {
        let req = ReadRequest::ListRecords {
            ns: ns.name().into(),
            prefix: prefix.into(),
        };
        match self.read(group, req).await? {
            ReadResponse::Records(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }
}

/// `read` until it is not refused `Moved`, each time once `newer(epoch)` says this node routes
/// by the map the refusal named, or until `deadline`: then the refusal is the answer. A
/// refusal names an epoch newer than the read's, so each attempt reads by a newer map than the
/// last: no busy loop.
async fn retry_moved<T, F, Fut, W, WF>(deadline: Instant, read: F, newer: W) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
    W: Fn(u64) -> WF,
    WF: std::future::Future<Output = bool>,
{
    loop {
        match read().await {
            Err(Error::Moved { epoch }) if Instant::now() < deadline && newer(epoch).await => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A read refused `Moved` by each of `refusals` maps in turn, then answered.
    async fn read_after(refusals: u64, tries: &AtomicU64) -> Result<u64> {
        let n = tries.fetch_add(1, Ordering::SeqCst);
        match n < refusals {
            true => Err(Error::Moved { epoch: n + 2 }),
            false => Ok(n),
        }
    }

    #[tokio::test]
    async fn a_read_follows_every_newer_map_until_it_is_answered() {
        let tries = AtomicU64::new(0);
        let waited = std::sync::Mutex::new(Vec::new());
        let deadline = Instant::now() + Duration::from_secs(10);
        let newer = |epoch| {
            if let Ok(mut w) = waited.lock() {
                w.push(epoch);
            }
            async { true }
        };
        let answer = retry_moved(deadline, || read_after(3, &tries), newer).await;
        assert_eq!(answer.ok(), Some(3), "three refusals, then the answer");
        assert_eq!(tries.load(Ordering::SeqCst), 4);
        // Each attempt waited for the map its refusal named.
        assert_eq!(*waited.lock().expect("lock"), vec![2, 3, 4]);
    }

    #[tokio::test]
    async fn a_refusal_is_the_answer_once_no_newer_map_comes_or_time_is_up() {
        let tries = AtomicU64::new(0);
        let deadline = Instant::now() + Duration::from_secs(10);
        let answer = retry_moved(deadline, || read_after(5, &tries), |_| async { false }).await;
        assert!(
            matches!(answer, Err(Error::Moved { epoch: 2 })),
            "{answer:?}"
        );
        assert_eq!(tries.load(Ordering::SeqCst), 1);

        let tries = AtomicU64::new(0);
        let past = Instant::now();
        let answer = retry_moved(past, || read_after(5, &tries), |_| async { true }).await;
        assert!(matches!(answer, Err(Error::Moved { .. })), "{answer:?}");
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }
}
