//! Class schemas (spec 2.8): the column types of each class of each app.
//!
//! Schemas live as records of the metadata group (namespace [`Namespace::Schema`](crate::namespace::Namespace), key `app/class`). The
//! first write of a column fixes its type (`infer` turns a write's field updates into column
//! requirements, `ClassSchema::admit` checks them); the schema endpoints change columns
//! explicitly (`ClassSchema::alter`). Both run inside the metadata group's `apply`, so two
//! concurrent first writes of one column with different types cannot both succeed.

pub mod infer;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Record key of a class schema.
pub fn schema_key(app: &str, class: &str) -> String {
    format!("{app}/{class}")
}

/// Classes the service defines; they exist in every app without a schema record.
pub const SYSTEM_CLASSES: [&str; 3] = ["_User", "_Role", "_Installation"];

/// Columns every class has (spec 2.8).
pub const BUILT_IN_COLUMNS: [(&str, ColumnType); 4] = [
    ("ACL", ColumnType::Object),
    ("createdAt", ColumnType::Date),
    ("objectId", ColumnType::String),
    ("updatedAt", ColumnType::Date),
];

/// Columns the service defines on system classes, besides the built-in ones.
pub fn system_columns(class: &str) -> &'static [(&'static str, ColumnType)] {
    match class {
        "_User" => &[
            ("username", ColumnType::String),
            ("password", ColumnType::String),
            ("email", ColumnType::String),
            ("emailVerified", ColumnType::Bool),
            ("mobilePhoneNumber", ColumnType::String),
            ("mobilePhoneVerified", ColumnType::Bool),
            ("authData", ColumnType::Object),
        ],
        "_Role" => &[("name", ColumnType::String)],
        "_Installation" => &[
            ("deviceType", ColumnType::String),
            ("deviceToken", ColumnType::String),
            ("installationId", ColumnType::String),
            ("notificationUri", ColumnType::String),
            ("badge", ColumnType::Number),
            ("channels", ColumnType::Array),
            ("timeZone", ColumnType::String),
        ],
        _ => &[],
    }
}

/// The column types of spec 2.8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ColumnType {
    String,
    Number,
    Bool,
    Date,
    File,
    Geo,
    Array,
    Object,
    Pointer,
    Relation,
}

impl ColumnType {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "String" => ColumnType::String,
            "Number" => ColumnType::Number,
            "Bool" | "Boolean" => ColumnType::Bool,
            "Date" => ColumnType::Date,
            "File" => ColumnType::File,
            "Geo" | "GeoPoint" => ColumnType::Geo,
            "Array" => ColumnType::Array,
            "Object" => ColumnType::Object,
            "Pointer" => ColumnType::Pointer,
            "Relation" => ColumnType::Relation,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::String => "String",
            ColumnType::Number => "Number",
            ColumnType::Bool => "Bool",
            ColumnType::Date => "Date",
            ColumnType::File => "File",
            ColumnType::Geo => "Geo",
            ColumnType::Array => "Array",
            ColumnType::Object => "Object",
            ColumnType::Pointer => "Pointer",
            ColumnType::Relation => "Relation",
        }
    }

    /// Pointer and Relation columns name the class they point at.
    pub fn needs_target(self) -> bool {
        matches!(self, ColumnType::Pointer | ColumnType::Relation)
    }
}

/// One column: its type and, for Pointer and Relation, the class it points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    #[serde(rename = "type")]
    pub kind: ColumnType,
    #[serde(
        rename = "targetClass",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub target_class: Option<String>,
}

impl Column {
    pub fn of(kind: ColumnType) -> Self {
        Column {
            kind,
            target_class: None,
        }
    }

    pub fn pointing(kind: ColumnType, target: &str) -> Self {
        Column {
            kind,
            target_class: Some(target.to_string()),
        }
    }

    fn describe(&self) -> String {
        match &self.target_class {
            Some(t) => format!("{}<{t}>", self.kind.name()),
            None => self.kind.name().to_string(),
        }
    }
}

/// What a write needs of one column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Need {
    /// The column has exactly this type (created with it when absent).
    Exactly(Column),
    /// A dot path writes inside the column: it must be an Object or an Array (created as
    /// `default` when absent).
    Container { default: ColumnType },
}

pub use crate::error::{SchemaError, MAX_COLUMNS};

/// The schema of one class: user columns by name (built-in and system columns are implied).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassSchema {
    #[serde(rename = "className")]
    pub class_name: String,
    pub fields: BTreeMap<String, Column>,
}

/// A change the schema endpoints make to one column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ColumnChange {
    Add(String, Column),
    Delete(String),
}

impl ClassSchema {
    pub fn new(class_name: &str) -> Self {
        ClassSchema {
            class_name: class_name.to_string(),
            fields: BTreeMap::new(),
        }
    }

    /// The type of a column, counting built-in and system columns.
    pub fn column(&self, name: &str) -> Option<Column> {
        if let Some(c) = self.fields.get(name) {
            return Some(c.clone());
        }
        BUILT_IN_COLUMNS
            .iter()
            .chain(system_columns(&self.class_name))
            .find(|(n, _)| *n == name)
            .map(|(_, t)| Column::of(*t))
    }

    fn geo_column(&self) -> Option<&str> {
        self.fields
            .iter()
            .find(|(_, c)| c.kind == ColumnType::Geo)
            .map(|(n, _)| n.as_str())
    }

    /// Checks a write's requirements; returns the columns to add (empty when the schema
    /// already admits the write). `class_exists` tells whether a Relation's target exists.
    pub fn admit(
        &self,
        needs: &[(String, Need)],
        class_exists: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, Column)>, SchemaError> {
        let mut added: Vec<(String, Column)> = Vec::new();
        for (name, need) in needs {
            let have = self.column(name).or_else(|| {
                added
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, c)| c.clone())
            });
            match (have, need) {
                (Some(h), Need::Exactly(want)) if &h == want => {}
                (Some(h), Need::Container { .. })
                    if matches!(h.kind, ColumnType::Object | ColumnType::Array) => {}
                (Some(h), need) => {
                    let wanted = match need {
                        Need::Exactly(c) => c.describe(),
                        Need::Container { .. } => "Object or Array".into(),
                    };
                    return Err(SchemaError::TypeMismatch(format!(
                        "{name} is a {} column; this write needs {wanted}",
                        h.describe()
                    )));
                }
                (None, need) => {
                    let col = match need {
                        Need::Exactly(c) => c.clone(),
                        Need::Container { default } => Column::of(*default),
                    };
                    if col.kind == ColumnType::Geo {
                        let other = self.geo_column().map(str::to_string).or_else(|| {
                            added
                                .iter()
                                .find(|(_, c)| c.kind == ColumnType::Geo)
                                .map(|(n, _)| n.clone())
                        });
                        if let Some(other) = other {
                            return Err(SchemaError::TypeMismatch(format!(
                                "{name}: class {} already has the geo column {other}",
                                self.class_name
                            )));
                        }
                    }
                    if col.kind == ColumnType::Relation {
                        let target = col.target_class.as_deref().unwrap_or_default();
                        if target != self.class_name && !class_exists(target) {
                            return Err(SchemaError::ClassNotFound(target.to_string()));
                        }
                    }
                    added.push((name.clone(), col));
                }
            }
        }
        if !added.is_empty() && self.fields.len() + added.len() > MAX_COLUMNS {
            return Err(SchemaError::TooManyColumns(self.class_name.clone()));
        }
        Ok(added)
    }

    /// Applies the schema endpoints' column changes, all or nothing.
    pub fn alter(
        &mut self,
        changes: &[ColumnChange],
        class_exists: &dyn Fn(&str) -> bool,
    ) -> Result<(), SchemaError> {
        let mut next = self.clone();
        for change in changes {
            match change {
                ColumnChange::Add(name, col) => {
                    next.check_user_column(name)?;
                    if next.column(name).is_some() {
                        return Err(SchemaError::FieldExists(name.clone()));
                    }
                    match (&col.target_class, col.kind.needs_target()) {
                        (None, true) => return Err(SchemaError::MissingTargetClass(name.clone())),
                        (Some(t), true) if t != &next.class_name && !class_exists(t) => {
                            return Err(SchemaError::TargetClassMissing(name.clone(), t.clone()))
                        }
                        _ => {}
                    }
                    if col.kind == ColumnType::Geo {
                        if let Some(other) = next.geo_column() {
                            return Err(SchemaError::TypeMismatch(format!(
                                "{name}: class {} already has the geo column {other}",
                                next.class_name
                            )));
                        }
                    }
                    let mut col = col.clone();
                    if !col.kind.needs_target() {
                        col.target_class = None;
                    }
                    next.fields.insert(name.clone(), col);
                }
                ColumnChange::Delete(name) => {
                    next.check_user_column(name)?;
                    if next.fields.remove(name).is_none() {
                        return Err(SchemaError::UnknownField(name.clone()));
                    }
                }
            }
        }
        if next.fields.len() > MAX_COLUMNS.max(self.fields.len()) {
            return Err(SchemaError::TooManyColumns(self.class_name.clone()));
        }
        *self = next;
        Ok(())
    }

    fn check_user_column(&self, name: &str) -> Result<(), SchemaError> {
        if BUILT_IN_COLUMNS.iter().any(|(n, _)| *n == name) {
            return Err(SchemaError::ReservedField(name.to_string()));
        }
        if system_columns(&self.class_name)
            .iter()
            .any(|(n, _)| *n == name)
        {
            return Err(SchemaError::BuiltInColumn(
                name.to_string(),
                self.class_name.clone(),
            ));
        }
        Ok(())
    }

    /// The schema as the API returns it: built-in, system and user columns.
    pub fn render(&self) -> Value {
        let mut fields = Map::new();
        for (name, kind) in BUILT_IN_COLUMNS
            .iter()
            .chain(system_columns(&self.class_name))
        {
            fields.insert((*name).to_string(), json!({"type": kind.name()}));
        }
        for (name, col) in &self.fields {
            let mut c = json!({"type": col.kind.name()});
            if let Some(t) = &col.target_class {
                c["targetClass"] = json!(t);
            }
            fields.insert(name.clone(), c);
        }
        json!({"className": self.class_name, "fields": fields})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(c: &str) -> bool {
        c == "Other" || SYSTEM_CLASSES.contains(&c)
    }

    fn exactly(kind: ColumnType) -> Need {
        Need::Exactly(Column::of(kind))
    }

    #[test]
    fn first_write_fixes_the_type_and_a_later_other_type_is_refused() {
        let mut s = ClassSchema::new("Game");
        let added = s
            .admit(&[("score".into(), exactly(ColumnType::Number))], &exists)
            .unwrap();
        assert_eq!(
            added,
            vec![("score".into(), Column::of(ColumnType::Number))]
        );
        s.fields.extend(added);
        assert!(s
            .admit(&[("score".into(), exactly(ColumnType::Number))], &exists)
            .unwrap()
            .is_empty());
        assert!(matches!(
            s.admit(&[("score".into(), exactly(ColumnType::String))], &exists),
            Err(SchemaError::TypeMismatch(_))
        ));
    }

    #[test]
    fn built_in_columns_have_their_types() {
        let s = ClassSchema::new("Game");
        assert!(matches!(
            s.admit(&[("ACL".into(), exactly(ColumnType::Number))], &exists),
            Err(SchemaError::TypeMismatch(_))
        ));
        assert!(s
            .admit(&[("ACL".into(), exactly(ColumnType::Object))], &exists)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn one_geo_column_per_class() {
        let s = ClassSchema::new("Place");
        let two = [
            ("a".into(), exactly(ColumnType::Geo)),
            ("b".into(), exactly(ColumnType::Geo)),
        ];
        assert!(matches!(
            s.admit(&two, &exists),
            Err(SchemaError::TypeMismatch(_))
        ));
    }

    #[test]
    fn pointers_keep_their_target_class() {
        let mut s = ClassSchema::new("Post");
        let to_user = Need::Exactly(Column::pointing(ColumnType::Pointer, "_User"));
        s.fields
            .extend(s.admit(&[("author".into(), to_user)], &exists).unwrap());
        let to_other = Need::Exactly(Column::pointing(ColumnType::Pointer, "Other"));
        assert!(matches!(
            s.admit(&[("author".into(), to_other)], &exists),
            Err(SchemaError::TypeMismatch(_))
        ));
    }

    #[test]
    fn relations_need_an_existing_target() {
        let s = ClassSchema::new("Post");
        let rel = |t: &str| Need::Exactly(Column::pointing(ColumnType::Relation, t));
        assert!(matches!(
            s.admit(&[("tags".into(), rel("Nowhere"))], &exists),
            Err(SchemaError::ClassNotFound(_))
        ));
        assert!(s.admit(&[("likes".into(), rel("_User"))], &exists).is_ok());
        assert!(s.admit(&[("related".into(), rel("Post"))], &exists).is_ok());
    }

    #[test]
    fn dot_paths_need_a_container() {
        let mut s = ClassSchema::new("Game");
        s.fields.insert("n".into(), Column::of(ColumnType::Number));
        s.fields.insert("arr".into(), Column::of(ColumnType::Array));
        let c = Need::Container {
            default: ColumnType::Object,
        };
        assert!(s.admit(&[("arr".into(), c.clone())], &exists).is_ok());
        assert!(matches!(
            s.admit(&[("n".into(), c.clone())], &exists),
            Err(SchemaError::TypeMismatch(_))
        ));
        assert_eq!(
            s.admit(&[("stats".into(), c)], &exists).unwrap(),
            vec![("stats".into(), Column::of(ColumnType::Object))]
        );
    }

    #[test]
    fn alter_checks_every_rule_and_changes_nothing_on_error() {
        let mut s = ClassSchema::new("Game");
        let add = |n: &str, c: Column| ColumnChange::Add(n.into(), c);
        s.alter(&[add("score", Column::of(ColumnType::Number))], &exists)
            .unwrap();
        let before = s.clone();
        let cases = [
            (
                vec![add("score", Column::of(ColumnType::String))],
                "FieldExists",
            ),
            (
                vec![add("objectId", Column::of(ColumnType::String))],
                "ReservedField",
            ),
            (
                vec![add("p", Column::of(ColumnType::Pointer))],
                "MissingTargetClass",
            ),
            (
                vec![add("p", Column::pointing(ColumnType::Pointer, "Nope"))],
                "TargetClassMissing",
            ),
            (
                vec![
                    add("ok", Column::of(ColumnType::Bool)),
                    ColumnChange::Delete("missing".into()),
                ],
                "UnknownField",
            ),
        ];
        for (changes, want) in cases {
            let e = s.alter(&changes, &exists).unwrap_err();
            assert!(format!("{e:?}").starts_with(want), "{e:?} vs {want}");
            assert_eq!(s, before);
        }
        let mut user = ClassSchema::new("_User");
        assert!(matches!(
            user.alter(&[ColumnChange::Delete("username".into())], &exists),
            Err(SchemaError::BuiltInColumn(..))
        ));
        s.alter(&[ColumnChange::Delete("score".into())], &exists)
            .unwrap();
        assert!(s.fields.is_empty());
    }

    #[test]
    fn render_lists_built_in_columns() {
        let mut s = ClassSchema::new("Post");
        s.fields.insert(
            "author".into(),
            Column::pointing(ColumnType::Pointer, "_User"),
        );
        let v = s.render();
        assert_eq!(v["fields"]["createdAt"]["type"], "Date");
        assert_eq!(v["fields"]["ACL"]["type"], "Object");
        assert_eq!(v["fields"]["author"]["targetClass"], "_User");
    }
}
