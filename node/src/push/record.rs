//! A push as the cluster keeps it until it is done: one record in the metadata group
//! (namespace `push`, key `app/pushId`) holding what to send, to whom and when, and how far
//! its fan-out got — the page in flight and the cursor after the pages finished
//! (decisions/0022 §3). `fanout` moves it on with compare-and-set writes, so a runner that
//! lost the scheduler to another node stops at its next step; the record is removed when the
//! push is finished (its `_PushStatus` object, `status`, stays).

use std::collections::BTreeMap;

use basalt_cluster::ids::META_GROUP;
use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{Cluster, Error as ClusterError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::PushError;

/// How many recent errors a push keeps per provider.
const ERRORS_KEPT: usize = 5;

/// Where a push is (`_PushStatus.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushState {
    /// Waiting for its `push_time`.
    Scheduled,
    /// Due, not started.
    Pending,
    /// Being sent.
    Running,
    /// Every page sent; at least one message handed over (or no device targeted).
    Succeeded,
    /// Every page sent, no message handed over.
    Failed,
    /// Its expiry passed before it was (wholly) sent.
    Expired,
}

impl PushState {
    /// Whether the push is over (its status no longer changes).
    pub fn finished(self) -> bool {
        matches!(
            self,
            PushState::Succeeded | PushState::Failed | PushState::Expired
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            PushState::Scheduled => "scheduled",
            PushState::Pending => "pending",
            PushState::Running => "running",
            PushState::Succeeded => "succeeded",
            PushState::Failed => "failed",
            PushState::Expired => "expired",
        }
    }
}

/// The page being sent: resent as it was (same installations at most, same message ids) by
/// a runner that takes over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// 1 for the first page.
    pub number: u64,
    /// Its last installation's objectId.
    pub last: String,
}

/// What a push's pages did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Installations read (every page).
    pub targeted: u64,
    /// Messages a provider accepted.
    pub sent: u64,
    /// Messages no provider accepted.
    pub failed: u64,
    pub sent_per_type: BTreeMap<String, u64>,
    pub failed_per_type: BTreeMap<String, u64>,
    /// Device tokens a provider called dead, removed from their installations.
    pub tokens_removed: u64,
}

/// One accepted, unfinished push.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushRecord {
    pub app: AppId,
    pub push_id: ObjectId,
    pub data: Map<String, Value>,
    /// The `where` over `_Installation` (empty: every installation).
    pub query: Map<String, Value>,
    pub send_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    pub state: PushState,
    /// The last objectId of the pages finished (none before the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<Page>,
    /// Pages finished.
    #[serde(default)]
    pub pages: u64,
    #[serde(default)]
    pub counts: Counts,
    /// The latest errors per provider (at most `ERRORS_KEPT` each).
    #[serde(default)]
    pub errors: BTreeMap<String, Vec<String>>,
    /// The runner that moves it on (a token of one fan-out on one node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
}

impl PushRecord {
    /// A push of `app` just accepted, as asked: scheduled for later, or pending now; no page
    /// sent yet. Its id is new.
    pub fn accepted(app: &AppId, asked: super::request::PushRequest) -> PushRecord {
        PushRecord {
            app: app.clone(),
            push_id: ObjectId::random(),
            data: asked.data,
            query: asked.query,
            send_ms: asked.send_ms,
            expires_ms: asked.expires_ms,
            state: match asked.scheduled {
                true => PushState::Scheduled,
                false => PushState::Pending,
            },
            cursor: None,
            page: None,
            pages: 0,
            counts: Counts::default(),
            errors: Default::default(),
            runner: None,
        }
    }

    pub fn key(&self) -> String {
        record_key(&self.app, &self.push_id)
    }

    /// Whether it may no longer be sent at `now_ms`.
    pub fn expired_at(&self, now_ms: i64) -> bool {
        self.expires_ms.is_some_and(|e| now_ms >= e)
    }

    /// Whether nothing of it was sent yet.
    pub fn untouched(&self) -> bool {
        self.pages == 0 && self.page.is_none()
    }

    /// Adds a provider's error, keeping the latest few.
    pub fn note_error(&mut self, provider: &str, error: String) {
        let kept = self.errors.entry(provider.to_string()).or_default();
        if kept.last() != Some(&error) {
            kept.push(error);
        }
        if kept.len() > ERRORS_KEPT {
            kept.drain(..kept.len() - ERRORS_KEPT);
        }
    }

    fn to_value(&self) -> Result<Value, PushError> {
        serde_json::to_value(self).map_err(|e| PushError::Corrupt(e.to_string()))
    }
}

pub fn record_key(app: &str, push_id: &str) -> String {
    format!("{app}/{push_id}")
}

/// Stores a new push (it is sent from here on, whatever happens to the node that took it).
pub async fn insert(cluster: &Cluster, rec: &PushRecord) -> Result<(), PushError> {
    cluster
        .insert_record(
            META_GROUP,
            Namespace::Push,
            &rec.key(),
            rec.to_value()?,
            None,
        )
        .await?;
    Ok(())
}

/// Every unfinished push, linearizably.
pub async fn unfinished(cluster: &Cluster) -> Result<Vec<PushRecord>, PushError> {
    let records = cluster
        .list_records(META_GROUP, Namespace::Push, "")
        .await?;
    Ok(records
        .into_iter()
        .filter_map(|(key, v)| match serde_json::from_value(v) {
            Ok(rec) => Some(rec),
            Err(e) => {
                tracing::error!(%key, "unreadable push record: {e}");
                None
            }
        })
        .collect())
}

/// Replaces `old` by `new` (`None`: removes it) unless the record changed since `old` was
/// read: `PushError::Lost` then (another runner moved it on).
pub async fn replace(
    cluster: &Cluster,
    old: &PushRecord,
    new: Option<&PushRecord>,
) -> Result<(), PushError> {
    let expected = old.to_value()?;
    let value = new.map(PushRecord::to_value).transpose()?;
    match cluster
        .cas_record(
            META_GROUP,
            Namespace::Push,
            &old.key(),
            Some(expected),
            value.clone(),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(ClusterError::Conflict(_)) => {
            // A write retried after its first try committed finds its own value.
            let now = cluster
                .get_record(META_GROUP, Namespace::Push, &old.key())
                .await?;
            match now == value {
                true => Ok(()),
                false => Err(PushError::Lost),
            }
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_latest_few_without_repeats() {
        let mut rec = PushRecord {
            app: AppId::new_app("a".into()),
            push_id: ObjectId::parse("p").unwrap(),
            data: Map::new(),
            query: Map::new(),
            send_ms: 0,
            expires_ms: Some(10),
            state: PushState::Pending,
            cursor: None,
            page: None,
            pages: 0,
            counts: Counts::default(),
            errors: BTreeMap::new(),
            runner: None,
        };
        for i in 0..8 {
            rec.note_error("apns", format!("e{i}"));
            rec.note_error("apns", format!("e{i}"));
        }
        assert_eq!(rec.errors["apns"], ["e3", "e4", "e5", "e6", "e7"]);
        assert!(rec.untouched() && !rec.expired_at(9) && rec.expired_at(10));
        let back: PushRecord = serde_json::from_value(rec.to_value().unwrap()).unwrap();
        assert_eq!(back, rec);
    }
}
