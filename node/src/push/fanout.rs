//! Sending one push (decisions/0022 §3-4): the installations its query selects are read in
//! pages of `PAGE` in objectId order, each page starting after the cursor the record holds.
//! Before a page's messages leave, the page (its number and last objectId) is committed to
//! the push record; once the providers answered, the cursor moves past it with the counts. A
//! runner that takes the push over — the scheduler moved to another node — finds the page in
//! flight and sends it again (no installation past its last objectId, the same message ids),
//! then goes on. Every step is a compare-and-set of the record, so a runner that lost the
//! push to another stops at its next step.
//!
//! Callers: `dispatcher`. Neighbours: `record` (the push record), `status` (`_PushStatus`),
//! `provider` (delivery), the cluster's query coordinator (the pages).

use std::collections::BTreeMap;
use std::time::Instant;

use basalt_cluster::acl::Principals;
use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::query::filter::{Cond, Filter};
use basalt_cluster::query::{ScanRequest, SortKey};
use basalt_cluster::{now_ms, Cluster, Command, Error as ClusterError};
use serde_json::{json, Value};

use super::delivery::{message_id, Batch, Delivery, Message};
use super::provider::{AppProviders, Providers};
use super::record::{self, Page, PushRecord, PushState};
use super::settings::PushSettings;
use super::{status, PushError};
use crate::apps::find_app;
use crate::installations::INSTALLATION_CLASS;
use crate::users::unique::{self, Unique};

/// Installations per page.
pub const PAGE: usize = 1000;

/// The fields of an installation a message needs.
const FIELDS: [&str; 4] = [
    "deviceType",
    "deviceToken",
    "notificationUri",
    "installationId",
];

/// Sends `rec` from where its record says, while this node runs the scheduler.
pub async fn run(
    cluster: &Cluster,
    providers: &Providers,
    rec: PushRecord,
) -> Result<(), PushError> {
    let started = Instant::now();
    let mut rec = rec;
    // Claim it: from here on another runner's step fails.
    let mut claimed = rec.clone();
    claimed.runner = Some(runner_token());
    if !rec.expired_at(now_ms()) {
        claimed.state = PushState::Running;
    }
    record::replace(cluster, &rec, Some(&claimed)).await?;
    rec = claimed;
    let Some(app) = find_app(cluster, &rec.app).await? else {
        // The app is gone, and its objects with it.
        return record::replace(cluster, &rec, None).await;
    };
    let providers = providers.for_app(&app.settings::<PushSettings>()?);
    // The status the push was accepted with, unless its node died before writing it.
    status::create_missing(cluster, &rec).await?;
    status::update(cluster, &rec, rec.state).await?;
    // A query that cannot run (checked when accepted; a sub-query's result may have grown
    // past its bound since) fails the push rather than leaving it to be tried forever.
    let filter = match Filter::parse(&rec.query) {
        Ok(f) => {
            cluster
                .queries()
                .resolve(&rec.app, f, &Principals::master())
                .await
        }
        Err(e) => Err(ClusterError::InvalidValue(e.to_string())),
    };
    let filter = match filter {
        Ok(f) => f,
        Err(ClusterError::InvalidValue(why)) => {
            rec.note_error("query", why);
            metrics::counter!("basalt_pushes_total", "outcome" => "failed").increment(1);
            return finish(cluster, rec, PushState::Failed).await;
        }
        Err(e) => return Err(e.into()),
    };
    loop {
        if !cluster.runs_scheduler() {
            return Ok(());
        }
        if rec.expired_at(now_ms()) {
            metrics::counter!("basalt_pushes_total", "outcome" => "expired").increment(1);
            return finish(cluster, rec, PushState::Expired).await;
        }
        let rows = page_rows(cluster, &rec, &filter).await?;
        let page = match (&rec.page, rows.last()) {
            (Some(page), _) => page.clone(),
            (None, None) => {
                let done = match rec.counts.sent == 0 && rec.counts.targeted > 0 {
                    true => PushState::Failed,
                    false => PushState::Succeeded,
                };
                metrics::counter!("basalt_pushes_total", "outcome" => done.name()).increment(1);
                metrics::histogram!("basalt_push_fanout_seconds")
                    .record(started.elapsed().as_secs_f64());
                return finish(cluster, rec, done).await;
            }
            (None, Some(last)) => {
                let mut next = rec.clone();
                next.page = Some(Page {
                    number: rec.pages + 1,
                    last: object_id(last).to_string(),
                });
                record::replace(cluster, &rec, Some(&next)).await?;
                rec = next;
                rec.page.clone().ok_or(PushError::Lost)?
            }
        };
        let page_started = Instant::now();
        let mut next = rec.clone();
        send_page(
            cluster,
            &app.application_id,
            &providers,
            &mut next,
            page.number,
            &rows,
        )
        .await;
        // A page sent again may come back full before its end (installations created since
        // in its range): the next page starts after the last one sent.
        next.cursor = match rows.last() {
            Some(last) if rows.len() >= PAGE => Some(object_id(last).to_string()),
            _ => Some(page.last),
        };
        next.page = None;
        next.pages += 1;
        record::replace(cluster, &rec, Some(&next)).await?;
        rec = next;
        metrics::histogram!("basalt_push_page_seconds")
            .record(page_started.elapsed().as_secs_f64());
        if !cluster.runs_scheduler() {
            // The next scheduler writes the status from here on.
            return Ok(());
        }
        status::update(cluster, &rec, PushState::Running).await?;
    }
}

/// Writes the final status, then removes the record.
async fn finish(cluster: &Cluster, rec: PushRecord, done: PushState) -> Result<(), PushError> {
    status::update(cluster, &rec, done).await?;
    tracing::info!(push = %rec.push_id, app = %rec.app, status = done.name(),
        sent = rec.counts.sent, failed = rec.counts.failed, "push finished");
    record::replace(cluster, &rec, None).await
}

/// A token naming one runner of one push.
fn runner_token() -> String {
    use rand::Rng;
    format!("{:016x}", rand::rng().random::<u64>())
}

fn object_id(row: &Value) -> &str {
    row.get("objectId")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The installations of the next page (or of the page in flight, again).
async fn page_rows(
    cluster: &Cluster,
    rec: &PushRecord,
    filter: &Filter,
) -> Result<Vec<Value>, PushError> {
    let id = |cond| Filter::Field {
        path: "objectId".into(),
        cond,
    };
    let mut parts = vec![filter.clone()];
    if let Some(cursor) = &rec.cursor {
        parts.push(id(Cond::Gt(json!(cursor))));
    }
    if let Some(page) = &rec.page {
        parts.push(id(Cond::Lte(json!(page.last))));
    }
    // Pages follow objectId order: a `$nearSphere` would order them by distance.
    let order = match filter.near() {
        Some(_) => vec![SortKey {
            field: "objectId".into(),
            descending: false,
        }],
        None => Vec::new(),
    };
    let req = ScanRequest {
        app: rec.app.clone(),
        class: INSTALLATION_CLASS.clone(),
        filter: Filter::And(parts),
        order,
        skip: 0,
        limit: PAGE,
        principals: Principals::master(),
        count: false,
        keys: FIELDS.iter().map(|f| f.to_string()).collect(),
    };
    Ok(cluster.queries().scan(req).await?.0)
}

/// Hands a page to its providers and adds what became of it to `rec`'s counts.
async fn send_page(
    cluster: &Cluster,
    app: &AppId,
    providers: &AppProviders,
    rec: &mut PushRecord,
    page: u64,
    rows: &[Value],
) {
    rec.counts.targeted += rows.len() as u64;
    // Messages by provider; devices no provider reaches fail at once.
    let mut by_provider: BTreeMap<&'static str, (usize, Vec<Message>)> = BTreeMap::new();
    let mut unreachable: Vec<(String, String)> = Vec::new();
    let mut routes = Vec::new();
    for row in rows {
        let text = |f: &str| row.get(f).and_then(Value::as_str).map(str::to_string);
        let device_type = text("deviceType").unwrap_or_default();
        let token = match device_type.as_str() {
            "windows phone" => text("notificationUri"),
            _ => text("deviceToken"),
        };
        let provider = providers.route(&device_type);
        match (provider, token) {
            (Some(p), Some(token)) => {
                let entry = by_provider.entry(p.name()).or_insert_with(|| {
                    routes.push(p.clone());
                    (routes.len() - 1, Vec::new())
                });
                entry.1.push(Message {
                    id: message_id(&rec.push_id, object_id(row)),
                    installation: object_id(row).to_string(),
                    device_type,
                    token,
                    installation_id: text("installationId"),
                });
            }
            (None, _) => unreachable.push((
                device_type.clone(),
                format!("no provider for {device_type:?} devices: set push.apns, push.fcm, push.wns or push.webhook"),
            )),
            (Some(_), None) => {
                unreachable.push((device_type, "the installation has no device token".into()))
            }
        }
    }
    for (device_type, why) in unreachable {
        count(rec, "none", &device_type, &Delivery::Failed(why));
    }
    let sends = by_provider.into_iter().map(|(name, (route, messages))| {
        let provider = routes[route].clone();
        let data = rec.data.clone();
        let push_id = rec.push_id.clone();
        let expires_ms = rec.expires_ms;
        async move {
            let batch = Batch {
                push_id: &push_id,
                page,
                data: &data,
                expires_ms,
                messages,
            };
            let deliveries = provider.send(&batch).await;
            (name, batch.messages, deliveries)
        }
    });
    for (name, messages, deliveries) in futures::future::join_all(sends).await {
        for (m, d) in messages.iter().zip(deliveries.iter()) {
            count(rec, name, &m.device_type, d);
            if let Delivery::DeadToken(_) = d {
                if remove_token(cluster, app, m).await {
                    rec.counts.tokens_removed += 1;
                }
            }
        }
    }
}

/// Adds one delivery to the counts.
fn count(rec: &mut PushRecord, provider: &str, device_type: &str, d: &Delivery) {
    let outcome = match d {
        Delivery::Sent => {
            rec.counts.sent += 1;
            *rec.counts
                .sent_per_type
                .entry(device_type.to_string())
                .or_default() += 1;
            "sent"
        }
        Delivery::Failed(why) | Delivery::DeadToken(why) => {
            rec.counts.failed += 1;
            *rec.counts
                .failed_per_type
                .entry(device_type.to_string())
                .or_default() += 1;
            rec.note_error(provider, why.clone());
            match d {
                Delivery::DeadToken(_) => "dead_token",
                _ => "failed",
            }
        }
    };
    metrics::counter!("basalt_push_messages_total", "provider" => provider.to_string(), "outcome" => outcome)
        .increment(1);
}

/// Removes a token the provider called dead from its installation, if the installation still
/// holds it (checked on the shard with the write: a device that sent a new token meanwhile
/// keeps it), and frees it for another installation. Answers whether it was removed.
async fn remove_token(cluster: &Cluster, app: &AppId, m: &Message) -> bool {
    let field = match m.device_type.as_str() {
        "windows phone" => "notificationUri",
        _ => "deviceToken",
    };
    let updates = match basalt_cluster::update::parse_updates(
        &json!({field: {"__op": "Delete"}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    ) {
        Ok(u) => u,
        Err(_) => return false,
    };
    let Some(installation) = ObjectId::parse(&m.installation) else {
        return false;
    };
    let group = cluster.object_group(app, &INSTALLATION_CLASS, &installation);
    let cmd = Command::UpdateObject {
        app: app.clone(),
        class: INSTALLATION_CLASS.clone(),
        object_id: installation,
        now_ms: now_ms(),
        updates,
        principals: Principals::master(),
        unset: Vec::new(),
        holds: vec![(field.to_string(), json!(m.token))],
    };
    match cluster.propose_object(group, cmd).await {
        Ok(_) => {
            if field == "deviceToken" {
                if let Err(e) =
                    unique::release(cluster, app, Unique::DeviceToken, &m.token, &m.installation)
                        .await
                {
                    tracing::warn!(installation = %m.installation, "dead token kept claimed: {e}");
                }
            }
            true
        }
        // Gone, or holding another token now.
        Err(ClusterError::ObjectNotFound | ClusterError::Conflict(_)) => false,
        Err(e) => {
            tracing::warn!(installation = %m.installation, "dead token not removed: {e}");
            false
        }
    }
}
