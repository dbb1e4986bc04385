//! Plain object writes of a `/1/batch` (`api::batch`), grouped by shard: creates, updates and
//! deletes of user classes without triggers, which `api::objects` would each turn into one
//! command of the object's shard.
//!
//! A run of them is checked as their handlers check them (body, session, ACL principals),
//! in request order; the run's schema needs are admitted once per class (per operation, in
//! order, only when the class's schema must change in a way one admission cannot decide);
//! then every shard gets one Raft command carrying its operations in request order
//! (`Command::Batch`), proposed concurrently, and each operation answers from its own result.
//! Operations on one object are on one shard, in one command, so they apply in the order sent.

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::http::Method;
use axum::response::IntoResponse;
use basalt_cluster::acl::Principals;
use basalt_cluster::ids::{GroupId, META_GROUP};
use basalt_cluster::names::AppId;
use basalt_cluster::names::{ClassName, ObjectId};
use basalt_cluster::object::format_wire_time;
use basalt_cluster::schema::infer::requirements;
use basalt_cluster::update::{parse_updates, FieldUpdate};
use basalt_cluster::{now_ms, Command, CommandResult};
use serde_json::{json, Map, Value};

use super::batch_slot::slot;
use super::context::{AppState, RequestCtx};
use super::error::ApiError;
use super::objects::{admit_bytes, admit_write, new_object_id, CREATE_OVERHEAD};
use crate::functions::record::TriggerEvent;
use crate::functions::triggers;
use crate::storage_quota::{bytes_added, Admitted};
use crate::users::session::principals;

/// A batch operation that is a plain object write.
#[derive(Debug)]
pub struct ObjectWrite {
    kind: Kind,
    class: ClassName,
    token: Option<String>,
}

#[derive(Debug)]
enum Kind {
    Create(Map<String, Value>),
    Update(ObjectId, Map<String, Value>),
    Delete(ObjectId),
}

/// The operation as a plain object write, when it is one: `POST /1/classes/<class>` or
/// `PUT`/`DELETE /1/classes/<class>/<id>` with a valid user class and objectId, an object
/// body where one is needed, and no trigger on the class. Anything else — including every
/// request its handler must refuse — runs through the router as the single request would.
pub fn plain(
    state: &AppState,
    ctx: &RequestCtx,
    method: &Method,
    path: &str,
    body: &mut Option<Value>,
    token: &mut Option<String>,
) -> Option<ObjectWrite> {
    let rest = path.strip_prefix("/1/classes/")?;
    if rest.contains('%') {
        return None;
    }
    let mut parts = rest.split('/');
    let class = parts.next()?;
    let id = parts.next();
    if parts.next().is_some() || class.starts_with('_') {
        return None;
    }
    let class = ClassName::user(class).ok()?;
    // The body is taken only once the operation is known to be plain; until then it stays
    // with the operation for the router.
    let has_object = matches!(body, Some(Value::Object(_)));
    let (shape, events) = match (method, id) {
        (&Method::POST, None) if has_object => (Shape::Create, SAVE),
        (&Method::PUT, Some(id)) if has_object => (Shape::Update(ObjectId::parse(id)?), SAVE),
        (&Method::DELETE, Some(id)) => (Shape::Delete(ObjectId::parse(id)?), DELETE),
        _ => return None,
    };
    if state
        .cluster
        .object_group(&ctx.app.application_id, &class, "")
        == META_GROUP
        || !triggers::none_for(&state.functions, ctx, &class, events)
    {
        return None;
    }
    let mut object = || match body.take() {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let kind = match shape {
        Shape::Create => Kind::Create(object()),
        Shape::Update(id) => Kind::Update(id, object()),
        Shape::Delete(id) => Kind::Delete(id),
    };
    Some(ObjectWrite {
        kind,
        class,
        token: token.take(),
    })
}

/// What `plain` found the operation to be, before it takes the body.
enum Shape {
    Create,
    Update(ObjectId),
    Delete(ObjectId),
}

const SAVE: &[TriggerEvent] = &[TriggerEvent::BeforeSave, TriggerEvent::AfterSave];
const DELETE: &[TriggerEvent] = &[TriggerEvent::BeforeDelete, TriggerEvent::AfterDelete];

/// One checked write: its command's parts, and where its answer goes.
struct Ready {
    slot: usize,
    class: ClassName,
    object_id: ObjectId,
    op: ReadyOp,
    ctx: RequestCtx,
}

enum ReadyOp {
    Create(Vec<FieldUpdate>),
    Update(Vec<FieldUpdate>, Principals),
    Delete(Principals),
}

/// Which handler's answer a write gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Created,
    Updated,
    Deleted,
}

impl Ready {
    /// The updates a create or an update admits into the class schema (even none: a create
    /// may create the class); a delete admits nothing.
    fn updates(&self) -> Option<&[FieldUpdate]> {
        match &self.op {
            ReadyOp::Create(u) | ReadyOp::Update(u, _) => Some(u),
            ReadyOp::Delete(_) => None,
        }
    }

    fn command(self, app: &AppId, now: i64) -> (usize, ObjectId, Answer, Command) {
        let (app, class, object_id) = (app.clone(), self.class, self.object_id);
        let id = object_id.clone();
        let (answer, cmd) = match self.op {
            ReadyOp::Create(updates) => (
                Answer::Created,
                Command::CreateObject {
                    app,
                    class,
                    object_id: id,
                    now_ms: now,
                    updates,
                },
            ),
            ReadyOp::Update(updates, principals) => (
                Answer::Updated,
                Command::UpdateObject {
                    app,
                    class,
                    object_id: id,
                    now_ms: now,
                    updates,
                    principals,
                    unset: Vec::new(),
                    holds: Vec::new(),
                },
            ),
            ReadyOp::Delete(principals) => (
                Answer::Deleted,
                Command::DeleteObject {
                    app,
                    class,
                    object_id: id,
                    principals,
                },
            ),
        };
        (self.slot, object_id, answer, cmd)
    }
}

/// Runs a run of plain object writes; answers their slots in order.
pub async fn run(state: &AppState, ctx: &RequestCtx, writes: Vec<ObjectWrite>) -> Vec<Value> {
    if writes.is_empty() {
        return Vec::new();
    }
    let mut slots: Vec<Option<Value>> = vec![None; writes.len()];
    let max = state.max_body_bytes;
    let mut ready = Vec::with_capacity(writes.len());
    // One session's principals serve every operation that carries it.
    let mut sessions: HashMap<Option<String>, RequestCtx> = HashMap::new();
    for (i, w) in writes.into_iter().enumerate() {
        let op_ctx = sessions
            .entry(w.token.clone())
            .or_insert_with(|| ctx.for_operation(w.token.clone()))
            .clone();
        match check(state, &op_ctx, w).await {
            Ok((class, object_id, op)) => ready.push(Ready {
                slot: i,
                class,
                object_id,
                op,
                ctx: op_ctx,
            }),
            Err(e) => slots[i] = Some(slot(e.into_response(), max).await),
        }
    }
    for (slot_index, e) in admit_schemas(state, ctx, &mut ready).await {
        slots[slot_index] = Some(slot(e.into_response(), max).await);
    }
    let (_admitted, refused) = admit_quota(state, &mut ready).await;
    for (slot_index, e) in refused {
        slots[slot_index] = Some(slot(e.into_response(), max).await);
    }
    let answers = propose_by_shard(state, &ctx.app.application_id, ready).await;
    for (i, answer) in answers {
        slots[i] = Some(match answer {
            Ok(body) => json!({ "success": body }),
            Err(e) => slot(e.into_response(), max).await,
        });
    }
    slots
        .into_iter()
        .map(|s| s.unwrap_or_else(slot_missing))
        .collect()
}

fn slot_missing() -> Value {
    json!({"error": {"code": 500, "error": super::error::BUSY_MESSAGE}})
}

/// What the operation's handler checks before it proposes, in the same order: the body's
/// updates, then (updates and deletes) the caller's principals. A create's objectId is picked
/// here, as the handler picks it.
async fn check(
    state: &AppState,
    ctx: &RequestCtx,
    w: ObjectWrite,
) -> Result<(ClassName, ObjectId, ReadyOp), ApiError> {
    let acl = || async {
        principals(&state.cluster, &state.roles, ctx)
            .await
            .map_err(ApiError::from)
    };
    Ok(match w.kind {
        Kind::Create(body) => {
            let updates = parse_updates(&body)?;
            let id = new_object_id(state, &ctx.app.application_id, &w.class);
            (w.class, id, ReadyOp::Create(updates))
        }
        Kind::Update(id, body) => {
            let updates = parse_updates(&body)?;
            let who = acl().await?;
            (w.class, id, ReadyOp::Update(updates, who))
        }
        Kind::Delete(id) => {
            let who = acl().await?;
            (w.class, id, ReadyOp::Delete(who))
        }
    })
}

/// Admits the writes' column needs into their class schemas: once per class with every
/// write's needs together, which settles the common case (columns that exist, or new ones
/// every write agrees on) in at most one proposal. When that is refused, the class's writes
/// are admitted one by one in request order, as alone, and those refused leave `ready` with
/// their errors (answered as `(slot, error)`).
async fn admit_schemas(
    state: &AppState,
    ctx: &RequestCtx,
    ready: &mut Vec<Ready>,
) -> Vec<(usize, ApiError)> {
    let mut classes: BTreeMap<&ClassName, Vec<usize>> = BTreeMap::new();
    for (i, r) in ready.iter().enumerate() {
        if r.updates().is_some() {
            classes.entry(&r.class).or_default().push(i);
        }
    }
    let mut refused: Vec<(usize, ApiError)> = Vec::new();
    for (class, members) in &classes {
        let mut needs = Vec::new();
        for &i in members {
            for need in requirements(ready[i].updates().unwrap_or_default()) {
                if !needs.contains(&need) {
                    needs.push(need);
                }
            }
        }
        let may_create = ctx.master || ctx.app.not_allowed_create_table == 0;
        let together = state
            .cluster
            .catalog()
            .ensure_columns(&ctx.app.application_id, class, &needs, may_create)
            .await;
        if together.is_ok() {
            continue;
        }
        for &i in members {
            let r = &ready[i];
            let updates = r.updates().unwrap_or_default();
            if let Err(e) = admit_write(state, &r.ctx, class, updates).await {
                refused.push((r.slot, e));
            }
        }
    }
    // Slots are the operations' places in the batch: one per write.
    let refused_slots: HashSet<usize> = refused.iter().map(|(slot, _)| *slot).collect();
    ready.retain(|r| !refused_slots.contains(&r.slot));
    refused
}

/// Admits the writes' bytes under the app's `objectsQuotaMb`, in request order: the admitted
/// (to hold until they are proposed), and the refused, which leave `ready` with their errors
/// (answered as `(slot, error)`).
async fn admit_quota(
    state: &AppState,
    ready: &mut Vec<Ready>,
) -> (Vec<Admitted>, Vec<(usize, ApiError)>) {
    let (mut admitted, mut refused) = (Vec::new(), Vec::new());
    // One reading of the app's usage serves the whole batch.
    let arrived = std::time::Instant::now();
    for r in ready.iter() {
        let adds = match &r.op {
            ReadyOp::Create(updates) => CREATE_OVERHEAD + bytes_added(updates),
            ReadyOp::Update(updates, _) => bytes_added(updates),
            ReadyOp::Delete(_) => 0,
        };
        match admit_bytes(state, &r.ctx, (adds, arrived)).await {
            Ok(a) => admitted.push(a),
            Err(e) => refused.push((r.slot, e)),
        }
    }
    ready.retain(|r| !refused.iter().any(|(slot, _)| *slot == r.slot));
    (admitted, refused)
}

/// Proposes the writes, one command per shard (its writes in request order), the shards
/// concurrently; answers each write's slot and body or error.
async fn propose_by_shard(
    state: &AppState,
    app: &AppId,
    ready: Vec<Ready>,
) -> Vec<(usize, Result<Value, ApiError>)> {
    let now = now_ms();
    let mut shards: BTreeMap<GroupId, Vec<(usize, ObjectId, Answer, Command)>> = BTreeMap::new();
    for r in ready {
        let group = state.cluster.object_group(app, &r.class, &r.object_id);
        shards.entry(group).or_default().push(r.command(app, now));
    }
    metrics::counter!("basalt_batch_shard_commands_total").increment(shards.len() as u64);
    let proposals = shards.into_iter().map(|(group, writes)| async move {
        let (meta, mut cmds): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .map(|(slot, id, kind, cmd)| ((slot, id, kind), cmd))
            .unzip();
        metrics::counter!("basalt_batch_grouped_operations_total").increment(meta.len() as u64);
        let cmd = match cmds.len() {
            1 => cmds.pop().unwrap_or(Command::Batch(Vec::new())),
            _ => Command::Batch(cmds),
        };
        let results = match state.cluster.propose_object(group, cmd).await {
            Ok(p) => match p.result {
                CommandResult::Batch(results) => results.into_iter().map(Ok).collect(),
                one => vec![Ok(one)],
            },
            // The command as a whole failed (no leader in time, a timeout): every write of
            // it answers that.
            Err(e) => meta.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut results = results.into_iter();
        meta.into_iter()
            .map(|(slot, id, kind)| {
                let outcome = results.next().unwrap_or_else(|| {
                    Err(basalt_cluster::Error::Internal(
                        "a batch answered fewer results than it carried".into(),
                    ))
                });
                (slot, answer(outcome, &id, kind, now))
            })
            .collect::<Vec<_>>()
    });
    futures::future::join_all(proposals)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// A write's answer body from its command's result, as its handler shapes it.
fn answer(
    outcome: Result<CommandResult, basalt_cluster::Error>,
    id: &ObjectId,
    kind: Answer,
    now: i64,
) -> Result<Value, ApiError> {
    // A create's failure converts as `create_in`'s `?` does; an update's and a delete's name
    // the object (`ApiError::from_cluster`).
    let fail = |e| match kind {
        Answer::Created => ApiError::from(e),
        Answer::Updated | Answer::Deleted => ApiError::from_cluster(e, id),
    };
    let result = match outcome.map_err(fail)? {
        CommandResult::Rejected(e) => return Err(fail(e)),
        other => other,
    };
    Ok(match (kind, result) {
        (Answer::Created, r) => {
            let created_ms = match r {
                CommandResult::Created { created_ms, .. } => created_ms,
                _ => now,
            };
            json!({"createdAt": format_wire_time(created_ms), "objectId": id.to_string()})
        }
        (Answer::Updated, r) => {
            let updated_ms = match r {
                CommandResult::Updated { updated_ms } => updated_ms,
                _ => now_ms(),
            };
            json!({"updatedAt": format_wire_time(updated_ms)})
        }
        (Answer::Deleted, _) => json!({"msg": "ok"}),
    })
}
