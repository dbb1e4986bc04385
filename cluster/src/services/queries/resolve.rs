//! The coordinator's first step of a query: sub-queries run before the main scan and are pushed
//! down to the shards as plain sets. `$inQuery` / `$notInQuery` become `$in` / `$nin` of Pointers
//! to the matching objects, `$select` / `$dontSelect` `$in` / `$nin` of the selected key's
//! values, and `$relatedTo` the set of objectIds the parent's relation holds. Each sub-query
//! is itself a scatter-gather scan with the caller's principals, so it sees only what the caller
//! may read; one that matches more than `MAX_SUB_QUERY_ROWS` objects fails the query, and so
//! does a query of more than `MAX_SUB_QUERIES` sub-queries.

use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::Coordinator;
use crate::acl::{allows, Access, Principals};
use crate::error::{Error, Result};
use crate::names::{AppId, ClassName, ObjectId};
use crate::query::eval::lookup;
use crate::query::filter::{Cond, Filter, SubQuery};
use crate::query::ScanRequest;

/// Most objects a sub-query may match.
pub const MAX_SUB_QUERY_ROWS: usize = 10_000;

/// The only field a `$inQuery` sub-query needs of its rows.
const OBJECT_ID: &str = "objectId";

/// Most sub-queries one query may hold (each is a scan of every shard).
pub const MAX_SUB_QUERIES: usize = 20;

impl Coordinator {
    /// `filter` with every sub-query replaced by the set it stands for; refused (InvalidValue)
    /// when it holds more than `MAX_SUB_QUERIES`.
    pub async fn resolve(
        &self,
        app: &AppId,
        filter: Filter,
        principals: &Principals,
    ) -> Result<Filter> {
        let n = filter.sub_query_count();
        if n > MAX_SUB_QUERIES {
            return Err(Error::InvalidValue(format!(
                "a query may hold at most {MAX_SUB_QUERIES} sub-queries ($inQuery, $notInQuery, \
                 $select, $dontSelect, $relatedTo); this one holds {n}"
            )));
        }
        self.resolve_filter(app, filter, principals).await
    }

    /// `filter` with every sub-query replaced by the set it stands for.
    fn resolve_filter<'a>(
        &'a self,
        app: &'a AppId,
        filter: Filter,
        principals: &'a Principals,
    ) -> BoxFuture<'a, Result<Filter>> {
        Box::pin(async move {
            Ok(match filter {
                Filter::And(fs) => Filter::And(self.resolve_all(app, fs, principals).await?),
                Filter::Or(fs) => Filter::Or(self.resolve_all(app, fs, principals).await?),
                Filter::RelatedTo {
                    class,
                    object_id,
                    key,
                } => Filter::IdIn(
                    self.related_ids(app, &class, &object_id, &key, principals)
                        .await?,
                ),
                Filter::Field { path, cond } => Filter::Field {
                    cond: self.resolve_cond(app, cond, principals).await?,
                    path,
                },
                plain @ (Filter::All | Filter::IdIn(_)) => plain,
            })
        })
    }

    async fn resolve_all(
        &self,
        app: &AppId,
        fs: Vec<Filter>,
        principals: &Principals,
    ) -> Result<Vec<Filter>> {
        let mut out = Vec::with_capacity(fs.len());
        for f in fs {
            out.push(self.resolve_filter(app, f, principals).await?);
        }
        Ok(out)
    }

    async fn resolve_cond(&self, app: &AppId, cond: Cond, principals: &Principals) -> Result<Cond> {
        let pointers = |rows: Vec<Value>, class: &str| -> Vec<Value> {
            rows.iter()
                .filter_map(|r| r.get("objectId").and_then(Value::as_str))
                .map(|id| json!({"__type": "Pointer", "className": class, "objectId": id}))
                .collect()
        };
        let selected = |rows: Vec<Value>, key: &str| -> Vec<Value> {
            rows.iter()
                .filter_map(|r| lookup(r, key).cloned())
                .collect()
        };
        Ok(match cond {
            Cond::InQuery(q) => {
                let class = q.class.clone();
                let rows = self.sub_query(app, q, principals, OBJECT_ID).await?;
                Cond::In(pointers(rows, &class))
            }
            Cond::NotInQuery(q) => {
                let class = q.class.clone();
                let rows = self.sub_query(app, q, principals, OBJECT_ID).await?;
                Cond::Nin(pointers(rows, &class))
            }
            Cond::Select { key, query } => Cond::In(selected(
                self.sub_query(app, query, principals, &key).await?,
                &key,
            )),
            Cond::DontSelect { key, query } => Cond::Nin(selected(
                self.sub_query(app, query, principals, &key).await?,
                &key,
            )),
            plain => plain,
        })
    }

    /// Every object of the sub-query the caller may read (at most `MAX_SUB_QUERY_ROWS`), with
    /// its `key` only.
    async fn sub_query(
        &self,
        app: &AppId,
        q: SubQuery,
        principals: &Principals,
        key: &str,
    ) -> Result<Vec<Value>> {
        let filter = self.resolve_filter(app, *q.filter, principals).await?;
        // A name no class can have holds no objects (its own `where` was resolved first, so
        // its errors are answered as they always were).
        let Some(class) = ClassName::in_query(&q.class) else {
            return Ok(Vec::new());
        };
        let req = ScanRequest {
            app: app.clone(),
            class,
            filter,
            order: Vec::new(),
            skip: 0,
            limit: MAX_SUB_QUERY_ROWS + 1,
            principals: principals.clone(),
            count: false,
            keys: vec![key.to_string()],
        };
        let (rows, _) = self.scan(req).await?;
        if rows.len() > MAX_SUB_QUERY_ROWS {
            return Err(Error::InvalidValue(format!(
                "a sub-query on {} matches more than {MAX_SUB_QUERY_ROWS} objects",
                q.class
            )));
        }
        Ok(rows)
    }

    /// The objectIds `key` relation of `class/object_id` holds (none when the caller may not
    /// read that object or it does not exist).
    async fn related_ids(
        &self,
        app: &AppId,
        class: &str,
        object_id: &str,
        key: &str,
        principals: &Principals,
    ) -> Result<Vec<String>> {
        // A class or an id that cannot exist names no object, so the relation holds nothing.
        let (Some(class), Some(object_id)) =
            (ClassName::in_query(class), ObjectId::parse(object_id))
        else {
            return Ok(Vec::new());
        };
        let Some(parent) = self
            .replicas
            .get_stored_object(app, &class, &object_id)
            .await?
        else {
            return Ok(Vec::new());
        };
        if !allows(&parent.fields, principals, Access::Read) {
            return Ok(Vec::new());
        }
        Ok(parent.relation_members(key))
    }
}
