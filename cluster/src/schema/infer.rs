//! Column requirements of a write: what each field update needs of its column's type.
//!
//! Called by the API layer on a parsed body before the write is proposed; the requirements go
//! to `ClassSchema::admit` (locally, then in the metadata group when a column is new).

use serde_json::Value;

use super::{Column, ColumnType, Need};
use crate::update::{pointer_parts, FieldUpdate, UpdateOp};

/// The column type of a stored value; `None` for null (which fixes no type).
pub fn value_column(v: &Value) -> Option<Column> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Column::of(ColumnType::Bool),
        Value::Number(_) => Column::of(ColumnType::Number),
        Value::String(_) => Column::of(ColumnType::String),
        Value::Array(_) => Column::of(ColumnType::Array),
        Value::Object(m) => match m.get("__type").and_then(Value::as_str) {
            Some("Date") => Column::of(ColumnType::Date),
            Some("File") => Column::of(ColumnType::File),
            Some("GeoPoint") => Column::of(ColumnType::Geo),
            Some("Pointer") => match pointer_parts(v) {
                Some((cls, _)) => Column::pointing(ColumnType::Pointer, cls),
                None => Column::of(ColumnType::Object),
            },
            Some("Relation") => match m.get("className").and_then(Value::as_str) {
                Some(cls) => Column::pointing(ColumnType::Relation, cls),
                None => Column::of(ColumnType::Object),
            },
            _ => Column::of(ColumnType::Object),
        },
    })
}

/// What the updates of one write need of their columns, in body order.
pub fn requirements(updates: &[FieldUpdate]) -> Vec<(String, Need)> {
    let mut out = Vec::with_capacity(updates.len());
    for u in updates {
        let Some(column) = u.path.first() else {
            continue;
        };
        if let Some(second) = u.path.get(1) {
            let default = if second.parse::<usize>().is_ok() {
                ColumnType::Array
            } else {
                ColumnType::Object
            };
            out.push((column.clone(), Need::Container { default }));
            continue;
        }
        let col = match &u.op {
            UpdateOp::Set(v) => value_column(v),
            UpdateOp::Delete => None,
            UpdateOp::Increment(_) | UpdateOp::IncrementInRange(_) => {
                Some(Column::of(ColumnType::Number))
            }
            UpdateOp::Add(_) | UpdateOp::AddUnique(_) | UpdateOp::Remove(_) => {
                Some(Column::of(ColumnType::Array))
            }
            UpdateOp::AddRelation { class_name, .. }
            | UpdateOp::RemoveRelation { class_name, .. } => {
                Some(Column::pointing(ColumnType::Relation, class_name))
            }
        };
        if let Some(col) = col {
            out.push((column.clone(), Need::Exactly(col)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::parse_updates;
    use serde_json::json;

    fn needs(body: Value) -> Vec<(String, Need)> {
        requirements(&parse_updates(body.as_object().unwrap()).unwrap())
    }

    fn ty(n: &[(String, Need)], name: &str) -> Option<Need> {
        n.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn every_value_and_operator_has_its_type() {
        let n = needs(json!({
            "s": "x", "n": 1.5, "b": true, "a": [1], "o": {"k": 1},
            "d": {"__type": "Date", "iso": "2024-01-01 00:00:00"},
            "f": {"__type": "File", "filename": "a.txt", "url": "http://x/a.txt"},
            "g": {"__type": "GeoPoint", "latitude": 1, "longitude": 2},
            "p": {"__type": "Pointer", "className": "Post", "objectId": "abc"},
            "r": {"__type": "Relation", "className": "Tag"},
            "inc": {"__op": "Increment", "amount": 1},
            "add": {"__op": "AddUnique", "objects": [1]},
            "rel": {"__op": "AddRelation", "objects": [{"__type": "Pointer", "className": "_User", "objectId": "u"}]},
            "gone": {"__op": "Delete"},
            "nothing": null,
            "stats.wins": 1,
            "items.0.name": "x",
        }));
        let exactly = |k: ColumnType| Some(Need::Exactly(Column::of(k)));
        assert_eq!(ty(&n, "s"), exactly(ColumnType::String));
        assert_eq!(ty(&n, "n"), exactly(ColumnType::Number));
        assert_eq!(ty(&n, "b"), exactly(ColumnType::Bool));
        assert_eq!(ty(&n, "a"), exactly(ColumnType::Array));
        assert_eq!(ty(&n, "o"), exactly(ColumnType::Object));
        assert_eq!(ty(&n, "d"), exactly(ColumnType::Date));
        assert_eq!(ty(&n, "f"), exactly(ColumnType::File));
        assert_eq!(ty(&n, "g"), exactly(ColumnType::Geo));
        assert_eq!(
            ty(&n, "p"),
            Some(Need::Exactly(Column::pointing(ColumnType::Pointer, "Post")))
        );
        assert_eq!(
            ty(&n, "r"),
            Some(Need::Exactly(Column::pointing(ColumnType::Relation, "Tag")))
        );
        assert_eq!(ty(&n, "inc"), exactly(ColumnType::Number));
        assert_eq!(ty(&n, "add"), exactly(ColumnType::Array));
        assert_eq!(
            ty(&n, "rel"),
            Some(Need::Exactly(Column::pointing(
                ColumnType::Relation,
                "_User"
            )))
        );
        assert_eq!(ty(&n, "gone"), None);
        assert_eq!(ty(&n, "nothing"), None);
        assert_eq!(
            ty(&n, "stats"),
            Some(Need::Container {
                default: ColumnType::Object
            })
        );
        assert_eq!(
            ty(&n, "items"),
            Some(Need::Container {
                default: ColumnType::Array
            })
        );
    }
}
