//! One subscription: what a committed change means to its subscriber.
//!
//! A change reaches a subscriber only if the object, as it is after the change (before it, for
//! a delete), is one the subscriber may read (its ACL, as the shard checks reads) and matches
//! the subscription's `where`. An update is judged on both sides: an object that starts to
//! qualify "enters", one that stops "leaves" (with the object as it was, if the subscriber may
//! no longer read it), one that qualifies on both sides is an "update". Users' protected fields
//! are hidden from other users as in every read (`users::protected`).

use std::sync::Arc;

use basalt_cluster::acl::{allows, Access};
use basalt_cluster::changes::{Change, ChangeKind};
use basalt_cluster::names::ClassName;
use basalt_cluster::object::StoredObject;
use basalt_cluster::query::filter::{Filter, Matcher};
use serde_json::{json, Value};

use super::wire::{Action, SubRequest};
use super::RealtimeError;
use crate::apps::AppRecord;
use crate::auth::Principals;
use crate::users::protected::UserView;
use crate::users::USER_CLASS;

/// What a change is to a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Create,
    Update,
    Enter,
    Leave,
    Delete,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Create => "create",
            EventKind::Update => "update",
            EventKind::Enter => "enter",
            EventKind::Leave => "leave",
            EventKind::Delete => "delete",
        }
    }
}

/// Which side of a change an event shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The object after the change (for a delete: as it was).
    Current,
    /// The object before an update.
    Before,
}

pub struct Subscription {
    pub app: Arc<AppRecord>,
    pub request: SubRequest,
    principals: Principals,
    matcher: Option<Matcher>,
    /// The start of every event's text: the subscription's own members.
    head: String,
}

impl Subscription {
    /// A subscription of `request` acting as `principals`; its class and `where` checked as a
    /// query's are (103, 102).
    pub fn new(
        app: Arc<AppRecord>,
        request: SubRequest,
        principals: Principals,
    ) -> Result<Subscription, RealtimeError> {
        ClassName::user_or_system(&request.table)
            .map_err(|_| RealtimeError::InvalidClassName(request.table.clone()))?;
        let matcher = match &request.filter {
            None => None,
            Some(w) => {
                let filter =
                    Filter::parse(w).map_err(|e| RealtimeError::InvalidWhere(e.to_string()))?;
                if filter.sub_queries() {
                    return Err(RealtimeError::InvalidWhere(
                        "a subscription's where cannot hold sub-queries or $relatedTo.".into(),
                    ));
                }
                crate::query::check_paths(&filter)
                    .map_err(|e| RealtimeError::InvalidWhere(e.to_string()))?;
                UserView::new(&app, &principals).check_query(
                    &request.table,
                    &filter,
                    std::iter::empty(),
                )?;
                Some(Matcher::new(filter).map_err(|e| RealtimeError::InvalidWhere(e.to_string()))?)
            }
        };
        let head = {
            let members = json!({
                "appKey": app.application_id.as_str(),
                "tableName": request.table,
                "objectId": request.object_id.clone().unwrap_or_default(),
                "action": request.action.name(),
            })
            .to_string();
            // Without its closing brace: the event's own members follow.
            members[..members.len().saturating_sub(1)].to_string()
        };
        Ok(Subscription {
            app,
            request,
            principals,
            matcher,
            head,
        })
    }

    pub fn class(&self) -> &str {
        &self.request.table
    }

    /// Whether the subscriber sees `object` (of id `id`): it may read it and it matches.
    fn qualifies(&self, id: &str, object: &StoredObject) -> bool {
        allows(&object.fields, &self.principals, Access::Read)
            && self
                .matcher
                .as_ref()
                .is_none_or(|m| m.matches(&object.render_for_query(id)))
    }

    fn may_read(&self, object: &StoredObject) -> bool {
        allows(&object.fields, &self.principals, Access::Read)
    }

    /// What `c` is to this subscriber, and which side of it the event shows; `None`: nothing.
    pub fn judge(&self, c: &Change) -> Option<(EventKind, Side)> {
        if c.app != self.app.application_id.as_str() || c.class != self.request.table {
            return None;
        }
        if self.request.action.is_row() && self.request.object_id.as_deref() != Some(&c.object_id) {
            return None;
        }
        let id = c.object_id.as_str();
        match (self.request.action, c.kind) {
            (Action::UpdateTable, ChangeKind::Create) => self
                .qualifies(id, &c.object)
                .then_some((EventKind::Create, Side::Current)),
            (Action::UpdateTable | Action::UpdateRow, ChangeKind::Update) => {
                let now = self.qualifies(id, &c.object);
                let before = c.before.as_ref().is_some_and(|b| self.qualifies(id, b));
                match (before, now) {
                    (false, true) => Some((EventKind::Enter, Side::Current)),
                    (true, true) => Some((EventKind::Update, Side::Current)),
                    (true, false) if self.may_read(&c.object) => {
                        Some((EventKind::Leave, Side::Current))
                    }
                    (true, false) => Some((EventKind::Leave, Side::Before)),
                    (false, false) => None,
                }
            }
            (Action::DeleteTable | Action::DeleteRow, ChangeKind::Delete) => self
                .qualifies(id, &c.object)
                .then_some((EventKind::Delete, Side::Current)),
            _ => None,
        }
    }

    /// Whether the rendering of an object depends on who looks (users' protected fields).
    pub fn renders_per_subscriber(&self) -> bool {
        self.request.table == USER_CLASS && !self.principals.is_master()
    }

    /// The object as this subscriber is shown it.
    pub fn render(&self, id: &str, object: &StoredObject) -> Value {
        let mut v = object.render(id);
        if self.request.table == USER_CLASS {
            UserView::new(&self.app, &self.principals).hide(&mut v);
        }
        v
    }

    /// The `server_pub` argument of an event up to its object's JSON text (which follows it,
    /// then `}`): the subscription's members, the event, where it is in its group
    /// (`position`) and the cursor after it.
    pub fn event_head(&self, kind: EventKind, c: &Change, cursor: &str) -> String {
        let mut out = String::with_capacity(self.head.len() + cursor.len() + 80);
        out.push_str(&self.head);
        out.push_str(r#","event":""#);
        out.push_str(kind.name());
        out.push_str(r#"","position":""#);
        out.push_str(&format!("{}:{}", c.group, c.index));
        out.push_str(r#"","cursor":""#);
        out.push_str(cursor);
        out.push_str(r#"","data":"#);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_cluster::ids::GroupId;

    fn app() -> Arc<AppRecord> {
        Arc::new(AppRecord::generate("t", "o@example.com"))
    }

    fn sub(
        app: &Arc<AppRecord>,
        action: Action,
        filter: Option<Value>,
        who: &[&str],
    ) -> Subscription {
        let request = SubRequest {
            app_key: app.application_id.as_str().to_string(),
            table: "Game".into(),
            object_id: action.is_row().then(|| "o1".to_string()),
            action,
            filter: filter.and_then(|f| f.as_object().cloned()),
            session_token: None,
            cursor: None,
        };
        let who = Principals::acting(who.iter().map(|s| s.to_string()).collect());
        Subscription::new(Arc::clone(app), request, who).unwrap()
    }

    fn obj(fields: Value) -> StoredObject {
        let mut o = StoredObject::new(1);
        o.fields = fields.as_object().cloned().unwrap_or_default();
        o
    }

    fn change(app: &AppRecord, kind: ChangeKind, now: Value, before: Option<Value>) -> Change {
        Change {
            group: GroupId::new(1),
            index: 5,
            kind,
            app: app.application_id.as_str().to_string(),
            class: "Game".into(),
            object_id: "o1".into(),
            object: obj(now),
            before: before.map(obj),
        }
    }

    #[test]
    fn updates_entering_and_leaving_the_filter_say_so() {
        let a = app();
        let s = sub(
            &a,
            Action::UpdateTable,
            Some(json!({"score": {"$gte": 10}})),
            &["*"],
        );
        let up = |b: i64, n: i64| {
            change(
                &a,
                ChangeKind::Update,
                json!({"score": n}),
                Some(json!({"score": b})),
            )
        };
        assert_eq!(s.judge(&up(1, 20)), Some((EventKind::Enter, Side::Current)));
        assert_eq!(
            s.judge(&up(20, 30)),
            Some((EventKind::Update, Side::Current))
        );
        assert_eq!(s.judge(&up(30, 2)), Some((EventKind::Leave, Side::Current)));
        assert_eq!(s.judge(&up(1, 2)), None);
        let created = change(&a, ChangeKind::Create, json!({"score": 11}), None);
        assert_eq!(s.judge(&created), Some((EventKind::Create, Side::Current)));
        let small = change(&a, ChangeKind::Create, json!({"score": 9}), None);
        assert_eq!(s.judge(&small), None);
        // Deletes are not updateTable's business.
        assert_eq!(
            s.judge(&change(&a, ChangeKind::Delete, json!({"score": 11}), None)),
            None
        );
    }

    #[test]
    fn private_objects_reach_only_those_who_may_read_them() {
        let a = app();
        let private = json!({"ACL": {"u1": {"read": true, "write": true}}});
        let anyone = sub(&a, Action::DeleteTable, None, &["*"]);
        let owner = sub(&a, Action::DeleteTable, None, &["*", "u1"]);
        let gone = change(&a, ChangeKind::Delete, private.clone(), None);
        assert_eq!(anyone.judge(&gone), None);
        assert_eq!(owner.judge(&gone), Some((EventKind::Delete, Side::Current)));
        // Made private: the others see it leave, shown as they last could read it.
        let hidden = change(&a, ChangeKind::Update, private, Some(json!({"n": 1})));
        assert_eq!(anyone.judge(&hidden), None);
        let watcher = sub(&a, Action::UpdateRow, None, &["*"]);
        assert_eq!(
            watcher.judge(&hidden),
            Some((EventKind::Leave, Side::Before))
        );
    }

    #[test]
    fn row_subscriptions_see_their_object_only() {
        let a = app();
        let s = sub(&a, Action::UpdateRow, None, &["*"]);
        let mut other = change(
            &a,
            ChangeKind::Update,
            json!({"n": 2}),
            Some(json!({"n": 1})),
        );
        assert_eq!(s.judge(&other), Some((EventKind::Update, Side::Current)));
        other.object_id = "o2".into();
        assert_eq!(s.judge(&other), None);
        let created = change(&a, ChangeKind::Create, json!({"n": 2}), None);
        assert_eq!(s.judge(&created), None);
    }

    #[test]
    fn filters_a_query_could_not_use_are_refused() {
        let a = app();
        for (w, why) in [
            (json!({"_password": "x"}), "internal field"),
            (
                json!({"p": {"$inQuery": {"where": {}, "className": "X"}}}),
                "sub-query",
            ),
            (json!({"n": {"$regex": "("}}), "bad regex"),
        ] {
            let request = SubRequest {
                app_key: String::new(),
                table: "Game".into(),
                object_id: None,
                action: Action::UpdateTable,
                filter: w.as_object().cloned(),
                session_token: None,
                cursor: None,
            };
            let r = Subscription::new(Arc::clone(&a), request, Principals::master());
            assert!(matches!(r, Err(RealtimeError::InvalidWhere(_))), "{why}");
        }
    }
}
