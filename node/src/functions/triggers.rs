//! A class's triggers around its writes (decisions/0023 §4): `api::objects` calls these for
//! creates, updates and deletes of user classes (`/1/classes/<class>`, alone or in a batch, or
//! from a function's data calls), on the node that received the request, before anything is
//! proposed — so the state machines apply plain commands and stay deterministic. A class's
//! `beforeSave` functions run in name order, each seeing the body as the one before left it;
//! it may change `request.object` (or return the object to save) or throw to refuse the write,
//! with its `Basalt.Error` code (310 for an error without one). `beforeDelete` may refuse a
//! delete. `afterSave` and `afterDelete` run once the write is committed, without holding up
//! the answer; their failures are logged and counted, never undo the write.

use basalt_cluster::names::{ClassName, ObjectId};
use serde_json::{json, Map, Value};

use super::engine::{RunError, Thrown};
use super::invoke::Invoker;
use super::record::{self, FunctionRecord, TriggerEvent};
use super::FunctionsError;
use crate::auth::RequestCtx;

/// A class's triggers for `event`, from this node's replica.
fn triggers_of(
    inv: &Invoker,
    ctx: &RequestCtx,
    class: &ClassName,
    event: TriggerEvent,
) -> Result<Vec<FunctionRecord>, FunctionsError> {
    record::local_triggers(&inv.cluster, &ctx.app.application_id, class, event)
}

/// Whether a class has triggers for any of `events` (a write without them pays nothing more).
pub fn has_any(
    inv: &Invoker,
    ctx: &RequestCtx,
    class: &ClassName,
    events: &[TriggerEvent],
) -> bool {
    events
        .iter()
        .any(|e| triggers_of(inv, ctx, class, *e).is_ok_and(|t| !t.is_empty()))
}

/// Whether a class certainly has no triggers for any of `events` (a failure to read them
/// counts as having some: the write then takes the path that reports it).
pub fn none_for(
    inv: &Invoker,
    ctx: &RequestCtx,
    class: &ClassName,
    events: &[TriggerEvent],
) -> bool {
    events
        .iter()
        .all(|e| triggers_of(inv, ctx, class, *e).is_ok_and(|t| t.is_empty()))
}

fn base_request(
    event: TriggerEvent,
    class: &ClassName,
    object_id: Option<&ObjectId>,
    user: &Value,
    ctx: &RequestCtx,
) -> Map<String, Value> {
    let mut r = Map::new();
    r.insert("triggerName".into(), json!(event.name()));
    r.insert("className".into(), json!(class));
    r.insert(
        "objectId".into(),
        object_id.map_or(Value::Null, |id| json!(id.to_string())),
    );
    r.insert("user".into(), user.clone());
    r.insert("master".into(), json!(ctx.master));
    r
}

/// The object as stored (for `request.original` and after-triggers), read as the service.
async fn stored(
    inv: &Invoker,
    ctx: &RequestCtx,
    class: &ClassName,
    id: &ObjectId,
) -> Result<Value, FunctionsError> {
    Ok(inv
        .cluster
        .get_object(&ctx.app.application_id, class, id)
        .await?
        .unwrap_or(Value::Null))
}

/// Runs the class's `beforeSave` triggers over a create (`object_id` none) or update body;
/// answers the body to write instead, when the class has any.
pub async fn before_save(
    inv: &Invoker,
    ctx: &RequestCtx,
    depth: u8,
    class: &ClassName,
    object_id: Option<&ObjectId>,
    body: &Map<String, Value>,
) -> Result<Option<Map<String, Value>>, FunctionsError> {
    let triggers = triggers_of(inv, ctx, class, TriggerEvent::BeforeSave)?;
    if triggers.is_empty() {
        return Ok(None);
    }
    let mut body = body.clone();
    let user = inv.caller_user(ctx).await?;
    let original = match object_id {
        Some(id) => stored(inv, ctx, class, id).await?,
        None => Value::Null,
    };
    for t in triggers {
        let mut request = base_request(TriggerEvent::BeforeSave, class, object_id, &user, ctx);
        request.insert("object".into(), Value::Object(body.clone()));
        request.insert("original".into(), original.clone());
        // The object to save: what the trigger returns, or `request.object` as it left it.
        let mut wrapped = t.clone();
        wrapped.source = format!(
            "const __returned = await (async (request) => {{ {}\n}})(request); \
             return {{ returned: __returned, object: request.object }};",
            t.source
        );
        let out = inv
            .invoke(ctx, depth, false, &wrapped, Value::Object(request))
            .await
            .map_err(FunctionsError::Refused)?;
        body = match (&out["returned"], &out["object"]) {
            (Value::Object(o), _) => o.clone(),
            (_, Value::Object(o)) => o.clone(),
            _ => {
                return Err(FunctionsError::Refused(RunError::Thrown(Thrown {
                    code: Some(310),
                    message: format!(
                        "beforeSave {} left request.object without an object",
                        t.name
                    ),
                    own: false,
                })))
            }
        };
    }
    Ok(Some(body))
}

/// Runs the class's `beforeDelete` triggers (which may refuse the delete); answers the object
/// as it was, for `afterDelete` (when the class has one).
pub async fn before_delete(
    inv: &Invoker,
    ctx: &RequestCtx,
    depth: u8,
    class: &ClassName,
    object_id: &ObjectId,
) -> Result<Option<Value>, FunctionsError> {
    let before = triggers_of(inv, ctx, class, TriggerEvent::BeforeDelete)?;
    let after = has_any(inv, ctx, class, &[TriggerEvent::AfterDelete]);
    if before.is_empty() && !after {
        return Ok(None);
    }
    let object = stored(inv, ctx, class, object_id).await?;
    if !before.is_empty() {
        let user = inv.caller_user(ctx).await?;
        for t in before {
            let mut request = base_request(
                TriggerEvent::BeforeDelete,
                class,
                Some(object_id),
                &user,
                ctx,
            );
            request.insert("object".into(), object.clone());
            inv.invoke(ctx, depth, false, &t, Value::Object(request))
                .await
                .map_err(FunctionsError::Refused)?;
        }
    }
    Ok(Some(object))
}

/// Starts the class's `afterSave` triggers of a committed create or update.
pub fn after_save(inv: &Invoker, ctx: &RequestCtx, depth: u8, class: &ClassName, id: &ObjectId) {
    after_write(inv, ctx, depth, TriggerEvent::AfterSave, class, id, None);
}

/// Starts the class's `afterDelete` triggers of a committed delete (`gone`: the object as it
/// was).
pub fn after_delete(
    inv: &Invoker,
    ctx: &RequestCtx,
    depth: u8,
    class: &ClassName,
    id: &ObjectId,
    gone: Value,
) {
    after_write(
        inv,
        ctx,
        depth,
        TriggerEvent::AfterDelete,
        class,
        id,
        Some(gone),
    );
}

/// Starts the class's after-triggers of a committed write (`afterSave` with the object as
/// stored now, `afterDelete` with the object as it was), without waiting for them.
fn after_write(
    inv: &Invoker,
    ctx: &RequestCtx,
    depth: u8,
    event: TriggerEvent,
    class: &ClassName,
    object_id: &ObjectId,
    gone: Option<Value>,
) {
    let triggers = match triggers_of(inv, ctx, class, event) {
        Ok(t) if !t.is_empty() => t,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(
                class = class.as_str(),
                "{} triggers not read: {e}",
                event.name()
            );
            return;
        }
    };
    let (inv, ctx, class, id) = (inv.clone(), ctx.clone(), class.clone(), object_id.clone());
    let work = async move {
        let object = match gone {
            Some(o) => o,
            None => match stored(&inv, &ctx, &class, &id).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!(class = class.as_str(), "afterSave object not read: {e}");
                    return;
                }
            },
        };
        let user = inv.caller_user(&ctx).await.unwrap_or(Value::Null);
        for t in triggers {
            let mut request = base_request(event, &class, Some(&id), &user, &ctx);
            request.insert("object".into(), object.clone());
            if let Err(e) = inv
                .invoke(&ctx, depth, true, &t, Value::Object(request))
                .await
            {
                tracing::warn!(class = class.as_str(), function = %t.name, "{} failed: {e}", event.name());
            }
        }
    };
    match basalt_cluster::request_id::current() {
        Some(id) => tokio::spawn(basalt_cluster::request_id::scope(id, work)),
        None => tokio::spawn(work),
    };
}
