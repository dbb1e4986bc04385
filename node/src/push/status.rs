//! `_PushStatus`: the object an app reads (with the master key) to follow a push — its
//! payload, query and times, `status` (scheduled, pending, running, succeeded, failed,
//! expired), and the counts and errors of its pages. Written with the push record it mirrors
//! (`record`): created by `api::push` when the push is accepted, brought up to date by
//! `fanout` after each page. Its objectId is the push's id; its ACL `{}` lets only the master
//! key read it.

use basalt_cluster::acl::Principals;
use basalt_cluster::names::ClassName;
use basalt_cluster::object::format_wire_time;
use basalt_cluster::schema::infer::requirements;
use basalt_cluster::update::parse_updates;
use basalt_cluster::{now_ms, Cluster, Command, Error as ClusterError};
use serde_json::{json, Map, Value};

use super::record::{PushRecord, PushState};
use super::PushError;

/// The class of push statuses.
pub static STATUS_CLASS: ClassName = ClassName::service("_PushStatus");

/// When the push finished: set with its final state, after which the status no longer
/// changes.
const FINISHED: &str = "finishedAt";

fn date(ms: i64) -> Value {
    json!({"__type": "Date", "iso": format_wire_time(ms)})
}

/// The fields that follow the push's progress.
fn progress(rec: &PushRecord, state: PushState) -> Map<String, Value> {
    let c = &rec.counts;
    let mut m = Map::new();
    m.insert("status".into(), json!(state.name()));
    m.insert("numTargeted".into(), json!(c.targeted));
    m.insert("numSent".into(), json!(c.sent));
    m.insert("numFailed".into(), json!(c.failed));
    m.insert("sentPerType".into(), json!(c.sent_per_type));
    m.insert("failedPerType".into(), json!(c.failed_per_type));
    m.insert("tokensRemoved".into(), json!(c.tokens_removed));
    m.insert("errors".into(), json!(rec.errors));
    m
}

/// Creates the status of a push just accepted.
pub async fn create(cluster: &Cluster, rec: &PushRecord) -> Result<(), PushError> {
    let app = &rec.app;
    let mut fields = progress(rec, rec.state);
    fields.insert("source".into(), json!("rest"));
    fields.insert("payload".into(), Value::Object(rec.data.clone()));
    fields.insert("query".into(), Value::Object(rec.query.clone()));
    fields.insert("pushTime".into(), date(rec.send_ms));
    if let Some(e) = rec.expires_ms {
        fields.insert("expirationTime".into(), date(e));
    }
    fields.insert("ACL".into(), json!({}));
    let updates = parse_updates(&fields)?;
    cluster
        .catalog()
        .ensure_columns(app, &STATUS_CLASS, &requirements(&updates), true)
        .await?;
    let group = cluster.object_group(app, &STATUS_CLASS, &rec.push_id);
    cluster
        .propose_object(
            group,
            Command::CreateObject {
                app: app.clone(),
                class: STATUS_CLASS.clone(),
                object_id: rec.push_id.clone(),
                now_ms: now_ms(),
                updates,
            },
        )
        .await?;
    Ok(())
}

/// Creates the status unless it exists (its push was accepted, or its runner created it).
pub async fn create_missing(cluster: &Cluster, rec: &PushRecord) -> Result<(), PushError> {
    match create(cluster, rec).await {
        Err(PushError::Cluster(ClusterError::Conflict(_))) => Ok(()),
        other => other,
    }
}

/// Writes the push's progress into its status (nothing when the status is gone: the app
/// deleted it). A final state also sets `finishedAt`, and no write applies to a status that
/// has one (checked on the shard, atomically with the write): a runner that lost the push
/// and writes late cannot undo its end.
pub async fn update(
    cluster: &Cluster,
    rec: &PushRecord,
    state: PushState,
) -> Result<(), PushError> {
    let mut fields = progress(rec, state);
    if state.finished() {
        fields.insert(FINISHED.into(), date(now_ms()));
    }
    let updates = parse_updates(&fields)?;
    let group = cluster.object_group(&rec.app, &STATUS_CLASS, &rec.push_id);
    let cmd = Command::UpdateObject {
        app: rec.app.clone(),
        class: STATUS_CLASS.clone(),
        object_id: rec.push_id.clone(),
        now_ms: now_ms(),
        updates,
        principals: Principals::master(),
        unset: vec![FINISHED.into()],
        holds: Vec::new(),
    };
    match cluster.propose_object(group, cmd).await {
        // Conflict: the push had already finished.
        Ok(_) | Err(ClusterError::ObjectNotFound) | Err(ClusterError::Conflict(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
