//! A stored file's identity and record: `FileId` (32 lowercase hex, the last part of its url
//! and the name of its copies) and `FileRecord`, the metadata kept through Raft in namespace
//! `file` of the shard `ids::file_group` names (decisions/0020). A file exists exactly when its
//! record does.

use serde::{Deserialize, Serialize};

/// A stored file's id: 32 lowercase hex characters (128 random bits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FileId(String);

impl FileId {
    /// A new random id.
    pub fn random() -> FileId {
        FileId(format!("{:032x}", rand::random::<u128>()))
    }

    /// The id written as `s`, when it is one (32 lowercase hex characters).
    pub fn parse(s: &str) -> Option<FileId> {
        (s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| FileId(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for FileId {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        FileId::parse(&s).ok_or_else(|| format!("not a file id: {s:?}"))
    }
}

impl From<FileId> for String {
    fn from(id: FileId) -> String {
        id.0
    }
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the cluster keeps about a stored file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The app that uploaded it (its applicationId).
    pub app: String,
    /// Its path under the cdn name: `YYYY/MM/DD/<id>.<ext>`.
    pub path: String,
    /// The name the client uploaded it under.
    pub filename: String,
    pub size: u64,
    pub content_type: String,
    /// Lowercase hex MD5 of the bytes (the ETag).
    pub md5: String,
    /// The user whose session uploaded it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader: Option<String>,
    pub created_ms: i64,
    /// The storage name answered as `cdn`.
    pub cdn: String,
    /// The bucket holding the bytes (`s3://<bucket>[/<prefix>]`, `bucket::Bucket`); none when
    /// they are copies on the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
}

/// What an upload's client says about the file; the cluster adds size and MD5.
#[derive(Debug, Clone)]
pub struct NewFile {
    pub app: String,
    pub path: String,
    pub filename: String,
    pub content_type: String,
    pub uploader: Option<String>,
    pub created_ms: i64,
    pub cdn: String,
}

impl NewFile {
    /// The record of this file once its `size` bytes with `md5` are stored (in `bucket`, or as
    /// copies when none).
    pub fn into_record(self, size: u64, md5: String, bucket: Option<String>) -> FileRecord {
        FileRecord {
            app: self.app,
            path: self.path,
            filename: self.filename,
            size,
            content_type: self.content_type,
            md5,
            uploader: self.uploader,
            created_ms: self.created_ms,
            cdn: self.cdn,
            bucket,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_lowercase_hex() {
        let id = FileId::random();
        assert_eq!(FileId::parse(id.as_str()), Some(id.clone()));
        assert_ne!(FileId::random(), id);
        for bad in [
            "",
            "../etc/passwd",
            &"A".repeat(32),
            &"0".repeat(31),
            &"g".repeat(32),
        ] {
            assert_eq!(FileId::parse(bad), None, "{bad}");
        }
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<FileId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<FileId>("\"../x\"").is_err());
    }
}
