//! Names checked once, where they enter: `AppId` (an app that exists: taken from its stored
//! record, which is how a request's app is authenticated), `ClassName` (a class a request may
//! address) and `ObjectId` (an id that can exist). Built from client input by their `parse`
//! functions, or read from the stored app; what holds one needs no further check. All read as
//! `&str`.
//!
//! Neighbours: `object` (the rules: `validate_class_name`, `is_object_id`) and `schema` (the
//! system classes).

use std::borrow::Cow;
use std::ops::Deref;

use crate::error::Result;
use crate::object::{is_object_id, new_object_id, validate_class_name};
use crate::schema::SYSTEM_CLASSES;

/// `as_str`, `Deref<Target = str>`, `Display` and `Debug` (both as the bare string, as the
/// `String` it replaced printed) and comparisons with strings, of a checked name.
macro_rules! reads_as_str {
    ($name:ident) => {
        impl $name {
            pub fn as_str(&self) -> &str {
                &*self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &*self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&*self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == &*other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == &*other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == &*other.0
            }
        }
    };
}

/// The id of an app. Made only when an app is created and read back from its stored record
/// (serialized as the bare string), so a request holds one only once its app was found.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct AppId(String);

impl AppId {
    /// The id of a new app (`id` is freshly made, never client input).
    pub fn new_app(id: String) -> AppId {
        AppId(id)
    }

    /// An id read back from a storage key (written from an `AppId`).
    pub(crate) fn stored(id: String) -> AppId {
        AppId(id)
    }
}

reads_as_str!(AppId);

/// Tests name their apps with literals.
#[cfg(test)]
impl From<&str> for AppId {
    fn from(id: &str) -> AppId {
        AppId(id.to_string())
    }
}

/// A class name that passed its check, or a class the service names itself (`service`).
/// Serialized as the bare string; decoding trusts what it reads (commands in logs written
/// before names were checked at the edge hold them as the client sent them, and service
/// classes such as `_PushStatus` are no user's to name).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ClassName(Cow<'static, str>);

impl ClassName {
    /// A class the service itself keeps (`_User`, `_Role`, `_Installation`, `_PushStatus`):
    /// named in the code, never taken from a request.
    pub const fn service(name: &'static str) -> ClassName {
        ClassName(Cow::Borrowed(name))
    }

    /// A user class (a letter first, then letters, digits and `_`, at most 64); 103 otherwise.
    pub fn user(name: &str) -> Result<ClassName> {
        validate_class_name(name)?;
        Ok(ClassName(Cow::Owned(name.to_string())))
    }

    /// A user class or a system class (`_User`, `_Role`, `_Installation`): schema endpoints
    /// address both.
    pub fn user_or_system(name: &str) -> Result<ClassName> {
        if SYSTEM_CLASSES.contains(&name) {
            return Ok(ClassName(Cow::Owned(name.to_string())));
        }
        ClassName::user(name)
    }

    /// The class a query's sub-query or `$relatedTo` names: any name a stored class can have
    /// (a user class's, or `_` and one, as the service's own classes are). `None`: no class
    /// has it, so nothing matches.
    pub fn in_query(name: &str) -> Option<ClassName> {
        let user = name.strip_prefix('_').unwrap_or(name);
        validate_class_name(user)
            .is_ok()
            .then(|| ClassName(Cow::Owned(name.to_string())))
    }
}

reads_as_str!(ClassName);

/// Tests name their classes with literals.
#[cfg(test)]
impl From<&str> for ClassName {
    fn from(name: &str) -> ClassName {
        ClassName(Cow::Owned(name.to_string()))
    }
}

/// An objectId that can exist: 1 to 64 ASCII letters and digits. Serialized as the bare
/// string; decoding trusts what it reads (commands in logs written before ids were checked at
/// the edge hold ids as the client sent them, and must apply as they did).
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ObjectId(String);

impl ObjectId {
    /// A new random id (10 characters).
    pub fn random() -> ObjectId {
        ObjectId(new_object_id())
    }

    /// The id, when it can exist (`None`: no object has it, so it is simply not found).
    pub fn parse(id: &str) -> Option<ObjectId> {
        is_object_id(id).then(|| ObjectId(id.to_string()))
    }
}

reads_as_str!(ObjectId);

/// Tests name their objects with literals.
#[cfg(test)]
impl From<&str> for ObjectId {
    fn from(id: &str) -> ObjectId {
        ObjectId(id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_once_at_the_edge() {
        assert_eq!(ClassName::user("GameScore").unwrap().as_str(), "GameScore");
        assert!(ClassName::user("_User").is_err());
        assert!(ClassName::user("1Game").is_err());
        assert_eq!(&*ClassName::user_or_system("_User").unwrap(), "_User");
        assert!(ClassName::user_or_system("_Secret").is_err());
        assert_eq!(ClassName::in_query("_PushStatus").unwrap(), "_PushStatus");
        assert_eq!(ClassName::in_query("Game").unwrap(), "Game");
        assert!(ClassName::in_query("__User").is_none());
        assert!(ClassName::in_query("1Game").is_none());
        assert!(ClassName::in_query("").is_none());
        assert!(ObjectId::parse("abc123XYZ").is_some());
        assert!(ObjectId::parse("").is_none());
        assert!(ObjectId::parse("../etc").is_none());
        assert!(ObjectId::parse(&"a".repeat(65)).is_none());
        let id = ObjectId::random();
        assert_eq!(ObjectId::parse(&id), Some(id));
    }
}
