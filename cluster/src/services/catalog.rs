//! Schema operations on a running cluster: what the API layer calls to check a write against
//! its class schema and to serve the schema endpoints.
//!
//! A write's column requirements are first checked against this node's replica of the metadata
//! group; only when a column (or the class) is new, or the replica disagrees, is an
//! `EnsureColumns` command proposed to the metadata group, which decides authoritatively. So the
//! steady state costs no extra Raft round, and the first write of a column costs one.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::command::{Command, CommandResult};
use crate::error::{Error, Result};
use crate::ids::META_GROUP;
use crate::names::{AppId, ClassName};
use crate::namespace::Namespace;
use crate::query::index::{meta_key, IndexMeta};
use crate::replicas::Replicas;
use crate::schema::{schema_key, ClassSchema, ColumnChange, Need, SchemaError, SYSTEM_CLASSES};

/// Objects removed per `PurgeClass` command (one Raft entry each).
const PURGE_BATCH: u32 = 500;
/// Objects re-indexed per `DeclareIndex` command: small enough that applying one page never
/// holds a shard's state machine long (heartbeats and other writes keep flowing).
const REBUILD_BATCH: u32 = 1_000;
/// Shards a paged command works on at once.
const PAGED_SHARDS_AT_ONCE: usize = 2;
/// Attempts of one page that failed to reach or hear from its leader. Repeating a page is
/// safe: a rebuild page writes the same entries again, a purge page deletes from the same
/// cursor onwards.
const PAGE_ATTEMPTS: u32 = 5;

/// A class's indexed columns as `GET /1/schemas/<class>/indexes` lists them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClassIndexes {
    /// Declared by the app (`declare_index`).
    pub declared: Vec<String>,
    /// Indexed by a shard by itself (decisions/0016), on at least one shard.
    pub automatic: BTreeSet<String>,
    /// Some shard reached the limit of automatic columns: later columns are not indexed there.
    pub full: bool,
    /// Opted out by the app (`drop_index`).
    pub opted_out: BTreeSet<String>,
}

fn decode(v: Value) -> Result<ClassSchema> {
    serde_json::from_value(v).map_err(|e| Error::Internal(format!("schema record: {e}")))
}

/// The schema operations, through this node's replicas.
pub struct Catalog<'a> {
    replicas: &'a Replicas,
}

impl<'a> Catalog<'a> {
    pub fn new(replicas: &'a Replicas) -> Self {
        Catalog { replicas }
    }

    /// The class schema as this node's metadata replica has it (may lag the leader).
    pub fn local_class_schema(
        &self,
        app: &AppId,
        class: &ClassName,
    ) -> Result<Option<ClassSchema>> {
        self.local_schema_named(app, class)
    }

    /// The schema of the class named `name`, as this node's metadata replica has it: a
    /// pointer's target class is named by the client's value.
    fn local_schema_named(&self, app: &AppId, name: &str) -> Result<Option<ClassSchema>> {
        self.replicas
            .local_meta_record(Namespace::Schema, &schema_key(app, name))?
            .map(decode)
            .transpose()
    }

    /// The class schema, linearizably. System classes always exist.
    pub async fn class_schema(
        &self,
        app: &AppId,
        class: &ClassName,
    ) -> Result<Option<ClassSchema>> {
        match self
            .replicas
            .get_record(META_GROUP, Namespace::Schema, &schema_key(app, class))
            .await?
        {
            Some(v) => Ok(Some(decode(v)?)),
            None if SYSTEM_CLASSES.contains(&class.as_str()) => Ok(Some(ClassSchema::new(class))),
            None => Ok(None),
        }
    }

    /// Every class schema of an app, linearizably, in class-name order.
    pub async fn class_schemas(&self, app: &AppId) -> Result<Vec<ClassSchema>> {
        self.replicas
            .list_records(META_GROUP, Namespace::Schema, &format!("{app}/"))
            .await?
            .into_iter()
            .map(|(_, v)| decode(v))
            .collect()
    }

    /// Makes sure the class schema admits a write with these column requirements, adding new
    /// columns (and the class, when `may_create_class`). Refusals are `Error::Schema`.
    pub async fn ensure_columns(
        &self,
        app: &AppId,
        class: &ClassName,
        needs: &[(String, Need)],
        may_create_class: bool,
    ) -> Result<()> {
        // Checked here first so that a write that cannot fit never reaches the metadata group
        // (apply checks again, against the schema the log decides).
        if needs.len() > crate::schema::MAX_COLUMNS {
            return Err(Error::Schema(SchemaError::TooManyColumns(
                class.to_string(),
            )));
        }
        if let Some(local) = self.local_class_schema(app, class)? {
            let exists = |c: &str| {
                SYSTEM_CLASSES.contains(&c)
                    || matches!(self.local_schema_named(app, c), Ok(Some(_)))
            };
            match local.admit(needs, &exists) {
                Ok(added) if added.is_empty() => return Ok(()),
                Err(e @ SchemaError::TooManyColumns(_)) => return Err(Error::Schema(e)),
                _ => {}
            }
        }
        let cmd = Command::EnsureColumns {
            app: app.clone(),
            class: class.clone(),
            needs: needs.to_vec(),
            may_create_class,
        };
        self.replicas.propose(META_GROUP, cmd).await.map(|_| ())
    }

    /// Creates a class with the given columns; answers the rendered schema.
    pub async fn create_class(
        &self,
        app: &AppId,
        class: &ClassName,
        changes: Vec<ColumnChange>,
    ) -> Result<Value> {
        let cmd = Command::CreateClass {
            app: app.clone(),
            class: class.clone(),
            changes,
        };
        self.schema_command(cmd).await
    }

    /// Adds and deletes columns; a deleted column's values are removed from every object of
    /// the class on every shard. Answers the rendered schema.
    pub async fn alter_class(
        &self,
        app: &AppId,
        class: &ClassName,
        changes: Vec<ColumnChange>,
    ) -> Result<Value> {
        let deleted: Vec<String> = changes
            .iter()
            .filter_map(|c| match c {
                ColumnChange::Delete(name) => Some(name.clone()),
                ColumnChange::Add(..) => None,
            })
            .collect();
        let cmd = Command::AlterClass {
            app: app.clone(),
            class: class.clone(),
            changes,
        };
        let rendered = self.schema_command(cmd).await?;
        for field in deleted {
            self.purge_class(app, class, Some(&field)).await?;
        }
        Ok(rendered)
    }

    /// Deletes a class: its schema, then its objects on every shard.
    pub async fn drop_class(&self, app: &AppId, class: &ClassName) -> Result<()> {
        if SYSTEM_CLASSES.contains(&class.as_str()) {
            return Err(Error::Schema(SchemaError::Invalid(format!(
                "the system class {class} cannot be deleted"
            ))));
        }
        let cmd = Command::DropClass {
            app: app.clone(),
            class: class.clone(),
        };
        self.replicas.propose(META_GROUP, cmd).await?;
        self.purge_class(app, class, None).await?;
        Ok(())
    }

    async fn schema_command(&self, cmd: Command) -> Result<Value> {
        match self.replicas.propose(META_GROUP, cmd).await?.result {
            CommandResult::Record(v) => Ok(v),
            other => Err(Error::Internal(format!(
                "unexpected schema result {other:?}"
            ))),
        }
    }

    /// Deletes every object of a class (or, with `field`, that field of every object) on
    /// every shard, in bounded commands. Answers how many objects changed.
    pub async fn purge_class(
        &self,
        app: &AppId,
        class: &ClassName,
        field: Option<&str>,
    ) -> Result<u64> {
        self.paged_on_every_shard(class, |after| Command::PurgeClass {
            app: app.clone(),
            class: class.clone(),
            field: field.map(str::to_string),
            after,
            limit: PURGE_BATCH,
        })
        .await
    }

    /// Declares `field` of a class indexed on every shard (none: rebuilds the class's indexes)
    /// and builds its entries; queries use the index once every page is done. Answers how many
    /// objects were indexed.
    pub async fn declare_index(
        &self,
        app: &AppId,
        class: &ClassName,
        field: Option<&str>,
    ) -> Result<u64> {
        let rebuild = crate::object::random_alphanumeric(16);
        self.paged_on_every_shard(class, |after| Command::DeclareIndex {
            app: app.clone(),
            class: class.clone(),
            field: field.map(str::to_string),
            after,
            limit: Some(REBUILD_BATCH),
            rebuild: Some(rebuild.clone()),
        })
        .await
    }

    /// Opts `field` of a class out of its indexes on every shard (automatic or declared) and
    /// deletes its entries; `declare_index` opts it back in. Answers how many entries went.
    pub async fn drop_index(&self, app: &AppId, class: &ClassName, field: &str) -> Result<u64> {
        self.paged_on_every_shard(class, |after| Command::DropIndex {
            app: app.clone(),
            class: class.clone(),
            field: field.into(),
            started: after.is_some(),
            limit: REBUILD_BATCH,
        })
        .await
    }

    /// A class's indexed columns: declared (as the first shard holding the class knows
    /// them), automatic on some shard, and opted out.
    pub async fn indexes(&self, app: &AppId, class: &ClassName) -> Result<ClassIndexes> {
        let groups = self.replicas.class_groups(class);
        let mut out = ClassIndexes::default();
        for (i, group) in groups.into_iter().enumerate() {
            let meta = self
                .replicas
                .get_record(group, Namespace::IndexMeta, &meta_key(app, class))
                .await?
                .and_then(|v| serde_json::from_value::<IndexMeta>(v).ok())
                .unwrap_or_default();
            if i == 0 {
                out.declared = meta.declared;
            }
            if let Some(auto) = meta.automatic {
                out.automatic.extend(auto.columns.into_keys());
                out.full |= auto.full;
            }
            out.opted_out.extend(meta.opted_out);
        }
        out.automatic.retain(|c| !out.declared.contains(c));
        Ok(out)
    }

    /// Runs a paged command (answering `Purged`) on every data shard until each is done, a few
    /// shards at a time, repeating a page whose outcome was lost to a leader change or timeout.
    async fn paged_on_every_shard(
        &self,
        class: &ClassName,
        make: impl Fn(Option<String>) -> Command + Sync,
    ) -> Result<u64> {
        use futures::StreamExt;
        let make = &make;
        let shards = self
            .replicas
            .class_groups(class)
            .into_iter()
            .map(|group| async move {
                let mut after: Option<String> = None;
                let mut total = 0;
                let mut failures = 0;
                loop {
                    let result = match self.replicas.propose(group, make(after.clone())).await {
                        Ok(p) => p.result,
                        Err(e) if page_may_repeat(&e) && failures + 1 < PAGE_ATTEMPTS => {
                            failures += 1;
                            tracing::info!(%group, "paged command: {e} (repeating the page)");
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    match result {
                        CommandResult::Purged { count, next } => {
                            total += count;
                            match next {
                                Some(n) => after = Some(n),
                                None => return Ok::<u64, Error>(total),
                            }
                        }
                        other => {
                            return Err(Error::Internal(format!(
                                "unexpected paged result {other:?}"
                            )))
                        }
                    }
                }
            });
        let results: Vec<Result<u64>> = futures::stream::iter(shards)
            .buffer_unordered(PAGED_SHARDS_AT_ONCE)
            .collect()
            .await;
        let mut total = 0;
        for r in results {
            total += r?;
        }
        Ok(total)
    }
}

/// Failures after which a page's command may have been applied or not: repeating it is safe.
fn page_may_repeat(e: &Error) -> bool {
    e.is_retryable() || matches!(e, Error::Unavailable(_) | Error::Timeout(_))
}
