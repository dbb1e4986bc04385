//! Apply of the metadata group's schema commands: admitting a write's columns, and the schema
//! endpoints' create, alter and drop. The rules themselves are `schema::ClassSchema`'s; this
//! file reads and writes the schema records.

use super::record_writes::{delete_record, put_record};
use super::staged::Staged;
use crate::command::CommandResult;
use crate::error::{Error, Result};
use crate::names::AppId;
use crate::namespace::Namespace;
use crate::schema::{schema_key, ClassSchema, ColumnChange, Need, SYSTEM_CLASSES};
use crate::storage::records::live_record;

fn load(st: &Staged<'_>, app: &AppId, class: &str) -> Result<Option<ClassSchema>> {
    match live_record(st, Namespace::Schema.name(), &schema_key(app, class), None)? {
        Some(rec) => Ok(Some(serde_json::from_value(rec.value)?)),
        None => Ok(None),
    }
}

fn store(st: &mut Staged<'_>, app: &AppId, schema: &ClassSchema) -> Result<()> {
    let key = schema_key(app, &schema.class_name);
    put_record(
        st,
        Namespace::Schema.name(),
        &key,
        serde_json::to_value(schema)?,
        None,
    )
    .map(|_| ())
}

/// Whether `class` of `app` exists: a system class, or one with a schema record.
fn class_exists(st: &Staged<'_>, app: &AppId, class: &str) -> bool {
    SYSTEM_CLASSES.contains(&class)
        || matches!(
            live_record(st, Namespace::Schema.name(), &schema_key(app, class), None),
            Ok(Some(_))
        )
}

fn rejected(e: crate::schema::SchemaError) -> Result<CommandResult> {
    Ok(CommandResult::Rejected(Error::Schema(e)))
}

pub(super) fn apply_ensure_columns(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    needs: &[(String, Need)],
    may_create_class: bool,
) -> Result<CommandResult> {
    let existing = load(st, app, class)?;
    let is_new = existing.is_none();
    if is_new && !may_create_class && !SYSTEM_CLASSES.contains(&class) {
        return rejected(crate::schema::SchemaError::ClassCreationNotAllowed(
            class.to_string(),
        ));
    }
    let mut schema = existing.unwrap_or_else(|| ClassSchema::new(class));
    let exists = |c: &str| class_exists(st, app, c);
    let added = match schema.admit(needs, &exists) {
        Ok(a) => a,
        Err(e) => return rejected(e),
    };
    if is_new || !added.is_empty() {
        schema.fields.extend(added);
        store(st, app, &schema)?;
    }
    Ok(CommandResult::Done)
}

pub(super) fn apply_create_class(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    changes: &[ColumnChange],
) -> Result<CommandResult> {
    if load(st, app, class)?.is_some() {
        return rejected(crate::schema::SchemaError::ClassExists(class.to_string()));
    }
    let mut schema = ClassSchema::new(class);
    let exists = |c: &str| class_exists(st, app, c);
    if let Err(e) = schema.alter(changes, &exists) {
        return rejected(e);
    }
    store(st, app, &schema)?;
    Ok(CommandResult::Record(schema.render()))
}

pub(super) fn apply_alter_class(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    changes: &[ColumnChange],
) -> Result<CommandResult> {
    let mut schema = match load(st, app, class)? {
        Some(s) => s,
        // System classes exist before anything is written to them.
        None if SYSTEM_CLASSES.contains(&class) => ClassSchema::new(class),
        None => return rejected(crate::schema::SchemaError::ClassNotFound(class.to_string())),
    };
    let exists = |c: &str| class_exists(st, app, c);
    if let Err(e) = schema.alter(changes, &exists) {
        return rejected(e);
    }
    store(st, app, &schema)?;
    Ok(CommandResult::Record(schema.render()))
}

pub(super) fn apply_drop_class(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
) -> Result<CommandResult> {
    if load(st, app, class)?.is_none() {
        return rejected(crate::schema::SchemaError::ClassNotFound(class.to_string()));
    }
    delete_record(st, Namespace::Schema.name(), &schema_key(app, class))
}
