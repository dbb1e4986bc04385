//! Users' private fields: `email` and `mobilePhoneNumber` (or the app's `protectedUserFields`)
//! of a `_User` object are shown only to that user itself and to the master key, as Parse
//! Server's default `protectedFields` does. Neither may another caller filter, sort or
//! aggregate on them, which would reveal them one guess at a time.
//!
//! Applied where user objects leave the node: `query::run` (listings, counts, aggregates),
//! `api::objects::get_in` and `query::projection::expand` (included users).

use basalt_cluster::acl::Principals;
use basalt_cluster::query::filter::{Cond, Filter};
use serde_json::Value;

use super::UsersError;
use super::USER_CLASS;
use crate::apps::AppRecord;

/// Fields of users hidden from other callers unless the app names its own.
pub const DEFAULT_PROTECTED: [&str; 2] = ["email", "mobilePhoneNumber"];

/// Who is looking at users, and what is hidden from them (borrowed from the request: built
/// for every read, it allocates nothing).
#[derive(Debug, Clone, Copy)]
pub struct UserView<'a> {
    /// The caller's principals: the master key's see everything; others hold the caller's
    /// own user id when it has a session.
    principals: &'a Principals,
    /// The app's own list, or `None` for [`DEFAULT_PROTECTED`].
    custom: Option<&'a [String]>,
}

impl<'a> UserView<'a> {
    pub fn new(app: &'a AppRecord, principals: &'a Principals) -> Self {
        UserView {
            principals,
            custom: app.protected_user_fields.as_deref(),
        }
    }

    /// The protected columns.
    fn protected(&self) -> impl Iterator<Item = &str> {
        let (custom, default) = match self.custom {
            Some(fields) => (fields.iter().map(String::as_str), &[][..]),
            None => ([].iter().map(String::as_str), &DEFAULT_PROTECTED[..]),
        };
        custom.chain(default.iter().copied())
    }

    /// Removes the protected fields from a rendered `_User` object that is not the caller's.
    pub fn hide(&self, user: &mut Value) {
        if self.principals.is_master() {
            return;
        }
        let own = user
            .get("objectId")
            .and_then(Value::as_str)
            .is_some_and(|id| self.principals.holds(id));
        if own {
            return;
        }
        if let Some(m) = user.as_object_mut() {
            for f in self.protected() {
                m.remove(f);
            }
        }
    }

    /// Hides protected fields in rows of `class` (only `_User` has any).
    pub fn hide_rows(&self, class: &str, rows: &mut [Value]) {
        if class == USER_CLASS {
            rows.iter_mut().for_each(|r| self.hide(r));
        }
    }

    /// Refuses (102), unless the caller holds the master key, a query that filters, sorts or
    /// aggregates users on a protected field: `fields` are the query's order and aggregation
    /// columns, and sub-queries of `_User` inside any query count too (`$inQuery` on users by
    /// email would reveal emails one guess at a time).
    pub fn check_query<'f>(
        &self,
        class: &str,
        filter: &Filter,
        fields: impl IntoIterator<Item = &'f str>,
    ) -> Result<(), UsersError> {
        if self.principals.is_master() {
            return Ok(());
        }
        let named = class == USER_CLASS
            && fields
                .into_iter()
                .any(|f| self.is_protected(f.trim_start_matches('-')));
        if named || self.touches(class, filter) {
            return Err(UsersError::ProtectedQuery(format!(
                "the fields {} of users can be queried only with the master key.",
                self.protected().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(())
    }

    fn is_protected(&self, path: &str) -> bool {
        let column = path.split('.').next().unwrap_or(path);
        self.protected().any(|f| f == column)
    }

    /// Whether `filter`, over objects of `class`, tests a protected field of users.
    fn touches(&self, class: &str, filter: &Filter) -> bool {
        let users = class == USER_CLASS;
        match filter {
            Filter::All | Filter::IdIn(_) => false,
            Filter::RelatedTo { .. } => false,
            Filter::And(fs) | Filter::Or(fs) => fs.iter().any(|f| self.touches(class, f)),
            Filter::Field { path, cond } => {
                (users && self.is_protected(path))
                    || match cond {
                        Cond::InQuery(q) | Cond::NotInQuery(q) => self.touches(&q.class, &q.filter),
                        Cond::Select { key, query } | Cond::DontSelect { key, query } => {
                            (query.class == USER_CLASS && self.is_protected(key))
                                || self.touches(&query.class, &query.filter)
                        }
                        _ => false,
                    }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app() -> AppRecord {
        AppRecord::generate("a", "owner@x")
    }

    #[test]
    fn others_do_not_see_private_fields() {
        let user =
            json!({"objectId": "u1", "username": "ada", "email": "a@x", "mobilePhoneNumber": "1"});
        let who = Principals::acting(vec!["*".to_string(), "u2".to_string()]);
        let mut seen = user.clone();
        UserView::new(&app(), &who).hide(&mut seen);
        assert_eq!(seen, json!({"objectId": "u1", "username": "ada"}));
        let me = Principals::acting(vec!["*".to_string(), "u1".to_string()]);
        let mut own = user.clone();
        UserView::new(&app(), &me).hide(&mut own);
        assert_eq!(own, user);
        let mut master = user.clone();
        UserView::new(&app(), &Principals::master()).hide(&mut master);
        assert_eq!(master, user);
        let mut custom = app();
        custom.protected_user_fields = Some(vec!["nick".into()]);
        let mut v = json!({"objectId": "u1", "nick": "n", "email": "a@x"});
        UserView::new(&custom, &who).hide(&mut v);
        assert_eq!(v, json!({"objectId": "u1", "email": "a@x"}));
    }

    #[test]
    fn protected_fields_cannot_be_queried_by_others() {
        let who = Principals::public();
        let app = app();
        let view = UserView::new(&app, &who);
        let by_email = Filter::parse(json!({"email": "a@x"}).as_object().unwrap()).unwrap();
        assert!(view.check_query(&USER_CLASS, &by_email, []).is_err());
        assert!(view.check_query("Post", &by_email, []).is_ok());
        assert!(view
            .check_query(&USER_CLASS, &Filter::All, ["-mobilePhoneNumber"])
            .is_err());
        assert!(view
            .check_query(&USER_CLASS, &Filter::All, ["username"])
            .is_ok());
        assert!(UserView::new(&app, &Principals::master())
            .check_query(&USER_CLASS, &by_email, [])
            .is_ok());
        // Through a sub-query of users from another class, and not for other classes' fields.
        let sub = |v: serde_json::Value| Filter::parse(v.as_object().unwrap()).unwrap();
        let in_users =
            sub(json!({"author": {"$inQuery": {"className": "_User", "where": {"email": "a@x"}}}}));
        assert!(view.check_query("Post", &in_users, []).is_err());
        let select =
            sub(json!({"x": {"$select": {"query": {"className": "_User"}, "key": "email"}}}));
        assert!(view.check_query("Post", &select, []).is_err());
        let contacts = sub(
            json!({"x": {"$select": {"query": {"className": "Contact", "where": {"email": "a"}}, "key": "email"}}}),
        );
        assert!(view.check_query(&USER_CLASS, &contacts, []).is_ok());
    }
}
