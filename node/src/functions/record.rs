//! Deployed functions as records of the metadata group (namespace `function`, key
//! `app/name`): the source, a version that grows by one with each deploy, and what runs it —
//! a client's call, a class's trigger, or a cron schedule. Every node reads them from its own
//! replica (a deploy answers once every reachable member has applied it); a class's triggers
//! are found through the index namespace `function_trigger` (key `app/class/event/name`),
//! written before the function's record and again after it, removed after the record no
//! longer names it (and written back if a concurrent deploy named it again meanwhile), and
//! checked against the function's own record when read, so a stale entry finds nothing.

use basalt_cluster::ids::META_GROUP;
use basalt_cluster::names::ClassName;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{Cluster, Error as ClusterError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::FunctionsError;

/// The longest source a function may have.
pub const MAX_SOURCE_BYTES: usize = 256 << 10;
/// Tries of a deploy or delete that loses its compare-and-set to a concurrent one.
const CAS_TRIES: usize = 20;

/// When a trigger runs, relative to its class's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TriggerEvent {
    BeforeSave,
    AfterSave,
    BeforeDelete,
    AfterDelete,
}

impl TriggerEvent {
    pub const ALL: [TriggerEvent; 4] = [
        TriggerEvent::BeforeSave,
        TriggerEvent::AfterSave,
        TriggerEvent::BeforeDelete,
        TriggerEvent::AfterDelete,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TriggerEvent::BeforeSave => "beforeSave",
            TriggerEvent::AfterSave => "afterSave",
            TriggerEvent::BeforeDelete => "beforeDelete",
            TriggerEvent::AfterDelete => "afterDelete",
        }
    }

    pub fn parse(name: &str) -> Option<TriggerEvent> {
        TriggerEvent::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether it runs before the write (and may change or refuse it).
    pub fn before(self) -> bool {
        matches!(self, TriggerEvent::BeforeSave | TriggerEvent::BeforeDelete)
    }
}

/// A class's trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    pub event: TriggerEvent,
    pub class_name: String,
}

/// One deployed function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionRecord {
    pub name: String,
    /// 1 for the first deploy, one more for each later one.
    pub version: u64,
    /// The body of an async function of `request`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    /// A cron expression (`croner`: 5 fields, or 6 with seconds first) it runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// When it was deployed (ms since the epoch).
    pub updated_ms: i64,
}

impl FunctionRecord {
    /// Whether clients may call it with `POST /1/functions/<name>` (triggers they may not).
    pub fn callable(&self) -> bool {
        self.trigger.is_none()
    }
}

/// A function's name: a letter or `_` first, then letters, digits, `_` or `-`, at most 64.
pub fn check_name(name: &str) -> Result<(), FunctionsError> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match ok {
        true => Ok(()),
        false => Err(FunctionsError::Invalid(format!(
            "invalid function name {name:?}: a letter or _ first, then letters, digits, _ or -, \
             at most 64."
        ))),
    }
}

/// A trigger's class: a user class (only user classes' writes run triggers; `_User`,
/// `_Role` and `_Installation` have endpoints of their own, decisions/0023).
pub fn check_trigger_class(name: &str) -> Result<(), FunctionsError> {
    ClassName::user(name)
        .map(|_| ())
        .map_err(|_| FunctionsError::Invalid(format!("invalid trigger class {name:?}.")))
}

fn key(app: &str, name: &str) -> String {
    format!("{app}/{name}")
}

fn trigger_key(app: &str, t: &Trigger, name: &str) -> String {
    format!("{app}/{}/{}/{name}", t.class_name, t.event.name())
}

fn decode(v: Value) -> Result<FunctionRecord, FunctionsError> {
    serde_json::from_value(v).map_err(|e| FunctionsError::Corrupt(e.to_string()))
}

fn encode(r: &FunctionRecord) -> Result<Value, FunctionsError> {
    serde_json::to_value(r).map_err(|e| FunctionsError::Corrupt(e.to_string()))
}

/// Stores `new` as the next version of its function (its `version` is set here); answers the
/// stored record once every reachable node has applied it.
pub async fn deploy(
    cluster: &Cluster,
    app: &str,
    mut new: FunctionRecord,
) -> Result<FunctionRecord, FunctionsError> {
    let k = key(app, &new.name);
    // The index first: a trigger is found only once both are there.
    put_index(cluster, app, &new).await?;
    for _ in 0..CAS_TRIES {
        let old = cluster
            .get_record(META_GROUP, Namespace::Function, &k)
            .await?;
        let old_rec = old.clone().map(decode).transpose()?;
        new.version = old_rec.as_ref().map_or(1, |r| r.version + 1);
        let value = encode(&new)?;
        match cluster
            .cas_record(
                META_GROUP,
                Namespace::Function,
                &k,
                old,
                Some(value.clone()),
            )
            .await
        {
            Ok(p) => {
                // Again after the record: a concurrent delete may have dropped it meanwhile.
                put_index(cluster, app, &new).await?;
                if let Some(t) = old_rec.and_then(|r| r.trigger) {
                    if new.trigger.as_ref() != Some(&t) {
                        drop_index(cluster, app, &t, &new.name).await?;
                    }
                }
                cluster.settle(META_GROUP, p.log_index).await;
                return Ok(new);
            }
            Err(ClusterError::Conflict(_)) => {
                // A retried write that committed on its first try finds its own value.
                let now = cluster
                    .get_record(META_GROUP, Namespace::Function, &k)
                    .await?;
                if now.as_ref() == Some(&value) {
                    // (rewritten as it is, for a log index to settle on)
                    let p = cluster
                        .cas_record(META_GROUP, Namespace::Function, &k, now.clone(), now)
                        .await?;
                    cluster.settle(META_GROUP, p.log_index).await;
                    return Ok(new);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(FunctionsError::Contended(new.name))
}

async fn put_index(cluster: &Cluster, app: &str, r: &FunctionRecord) -> Result<(), FunctionsError> {
    if let Some(t) = &r.trigger {
        cluster
            .put_record(
                META_GROUP,
                Namespace::FunctionTrigger,
                &trigger_key(app, t, &r.name),
                serde_json::json!({}),
                None,
            )
            .await?;
    }
    Ok(())
}

/// Drops the index entry of a trigger the record no longer names; puts it back when the
/// record names it again by now (a deploy that raced this one).
async fn drop_index(
    cluster: &Cluster,
    app: &str,
    t: &Trigger,
    name: &str,
) -> Result<(), FunctionsError> {
    cluster
        .take_record(
            META_GROUP,
            Namespace::FunctionTrigger,
            &trigger_key(app, t, name),
        )
        .await?;
    let now = cluster
        .get_record(META_GROUP, Namespace::Function, &key(app, name))
        .await?
        .map(decode)
        .transpose()?;
    if let Some(now) = now.filter(|r| r.trigger.as_ref() == Some(t)) {
        put_index(cluster, app, &now).await?;
    }
    Ok(())
}

/// Removes a function; answers whether there was one (once every reachable node applied it).
pub async fn remove(cluster: &Cluster, app: &str, name: &str) -> Result<bool, FunctionsError> {
    let k = key(app, name);
    for _ in 0..CAS_TRIES {
        let Some(old) = cluster
            .get_record(META_GROUP, Namespace::Function, &k)
            .await?
        else {
            return Ok(false);
        };
        let rec = decode(old.clone())?;
        match cluster
            .cas_record(META_GROUP, Namespace::Function, &k, Some(old), None)
            .await
        {
            Ok(p) => {
                if let Some(t) = &rec.trigger {
                    drop_index(cluster, app, t, name).await?;
                }
                if rec.cron.is_some() {
                    cluster
                        .take_record(META_GROUP, Namespace::FunctionRun, &k)
                        .await?;
                }
                cluster.settle(META_GROUP, p.log_index).await;
                return Ok(true);
            }
            Err(ClusterError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(FunctionsError::Contended(name.to_string()))
}

/// A function as this node's replica holds it, or (absent there: deployed a moment ago
/// through a node this one has not heard from yet) as the metadata group's leader does.
pub async fn find(
    cluster: &Cluster,
    app: &str,
    name: &str,
) -> Result<Option<FunctionRecord>, FunctionsError> {
    let k = key(app, name);
    let v = match cluster.local_meta_record(Namespace::Function, &k)? {
        Some(v) => Some(v),
        None => {
            cluster
                .get_record(META_GROUP, Namespace::Function, &k)
                .await?
        }
    };
    v.map(decode).transpose()
}

/// Every function of an app, linearizably, by name.
pub async fn list(cluster: &Cluster, app: &str) -> Result<Vec<FunctionRecord>, FunctionsError> {
    let mut out = cluster
        .list_records(META_GROUP, Namespace::Function, &format!("{app}/"))
        .await?
        .into_iter()
        .map(|(_, v)| decode(v))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Every function with a cron schedule, of every app, from this node's replica.
pub fn local_scheduled(cluster: &Cluster) -> Result<Vec<(String, FunctionRecord)>, FunctionsError> {
    let mut out = Vec::new();
    for (k, v) in cluster.local_meta_records(Namespace::Function)? {
        let Some((app, _)) = k.split_once('/') else {
            continue;
        };
        match decode(v) {
            Ok(rec) if rec.cron.is_some() => out.push((app.to_string(), rec)),
            Ok(_) => {}
            Err(e) => tracing::warn!(function = %k, "skipped: {e}"),
        }
    }
    Ok(out)
}

/// The triggers of `class` for `event` in this node's replica, by name.
pub fn local_triggers(
    cluster: &Cluster,
    app: &str,
    class: &str,
    event: TriggerEvent,
) -> Result<Vec<FunctionRecord>, FunctionsError> {
    let prefix = format!("{app}/{class}/{}/", event.name());
    let mut out = Vec::new();
    for (k, _) in cluster.local_meta_records_with_prefix(Namespace::FunctionTrigger, &prefix)? {
        let Some(name) = k.strip_prefix(&prefix) else {
            continue;
        };
        let Some(v) = cluster.local_meta_record(Namespace::Function, &key(app, name))? else {
            continue;
        };
        let rec = match decode(v) {
            Ok(rec) => rec,
            Err(e) => {
                tracing::warn!(function = name, app, "trigger skipped: {e}");
                continue;
            }
        };
        let wanted = Trigger {
            event,
            class_name: class.to_string(),
        };
        if rec.trigger.as_ref() == Some(&wanted) {
            out.push(rec);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_events_are_checked() {
        for ok in ["add", "_x", "a-b_c9", &"a".repeat(64)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "9a", "-a", "a b", "a/b", "a.b", &"a".repeat(65), "é"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(
            TriggerEvent::parse("afterDelete"),
            Some(TriggerEvent::AfterDelete)
        );
        assert_eq!(TriggerEvent::parse("aftersave"), None);
        assert!(check_trigger_class("GameScore").is_ok());
        assert!(check_trigger_class("_User").is_err());
    }
}
