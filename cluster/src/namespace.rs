//! `Namespace`: every kind of record (the state beside objects: schemas, members, apps, claims,
//! codes, quotas...). A record is addressed by group, namespace and key. A namespace's name is
//! part of the on-disk format (storage keys, `storage::keys::record_key`) and of the Raft log
//! (record commands carry it), so a name never changes; a new kind of record is a new variant.
//!
//! The record operations of `replicas::records` take a `Namespace`; the state machine below them
//! works on the names. Where a namespace's records live is its `Placement`: `record_group`
//! routes a record to its group (in place of routing words written at each caller).

use crate::ids::{shard_for, GroupId, META_GROUP};

/// A kind of record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Namespace {
    /// Class schemas (metadata group, key `app/class`).
    Schema,
    /// Cluster members (metadata group, keyed by node id).
    Node,
    /// Cluster-wide settings and the bootstrap marker (metadata group).
    Cluster,
    /// Apps (metadata group, keyed by applicationId).
    App,
    /// Console accounts (metadata group, keyed by email).
    Account,
    /// An app's secret key → its applicationId (signed requests name the app by secret key).
    AppSecret,
    /// Claims on unique values: usernames, emails, phone numbers, role names, linked accounts.
    Unique,
    /// Emailed verification and password-reset links.
    EmailLink,
    /// Nonces of signed requests, kept for the replay window.
    Nonce,
    /// SMS templates (metadata group, key `app/name`).
    SmsTemplate,
    /// Sent SMS messages and their state (key `app/smsId`).
    Sms,
    /// Live SMS codes (key `app/number/code`).
    SmsCode,
    /// SMS send quotas per number and per app.
    SmsQuota,
    /// SMS code verification attempts.
    SmsTries,
    /// The number a live code was sent to (key `app/code`).
    SmsCodeIndex,
    /// Issued captchas.
    Captcha,
    /// Validate tokens of solved captchas.
    CaptchaPass,
    /// Attempt counts of throttled operations (logins, mails).
    Tries,
    /// Which columns of a class are indexed, per shard (key `app/class`).
    IndexMeta,
    /// Stored files (key: the file's id; decisions/0020).
    File,
    /// Deleted files, for a day (key: the file's id): their copies may go at once.
    FileGone,
    /// Accepted pushes and their fan-out's progress (metadata group, key `app/pushId`).
    Push,
    /// Deployed cloud functions (metadata group, key `app/name`).
    Function,
    /// Which functions are triggers of a class (metadata group, key `app/class/event/name`).
    FunctionTrigger,
    /// Scheduled functions' last tick and run counts (metadata group, key `app/name`).
    FunctionRun,
    /// What an app stores in a group (key: the app's id; `usage::AppUsage`), kept by apply
    /// alone.
    Usage,
}

impl Namespace {
    /// Every namespace.
    pub const ALL: [Namespace; 26] = [
        Namespace::Schema,
        Namespace::Node,
        Namespace::Cluster,
        Namespace::App,
        Namespace::Account,
        Namespace::AppSecret,
        Namespace::Unique,
        Namespace::EmailLink,
        Namespace::Nonce,
        Namespace::SmsTemplate,
        Namespace::Sms,
        Namespace::SmsCode,
        Namespace::SmsQuota,
        Namespace::SmsTries,
        Namespace::SmsCodeIndex,
        Namespace::Captcha,
        Namespace::CaptchaPass,
        Namespace::Tries,
        Namespace::IndexMeta,
        Namespace::File,
        Namespace::FileGone,
        Namespace::Push,
        Namespace::Function,
        Namespace::FunctionTrigger,
        Namespace::FunctionRun,
        Namespace::Usage,
    ];

    /// The stored name (never changes: it is in keys on disk and in the Raft log).
    pub const fn name(self) -> &'static str {
        match self {
            Namespace::Schema => "schema",
            Namespace::Node => "node",
            Namespace::Cluster => "cluster",
            Namespace::App => "app",
            Namespace::Account => "account",
            Namespace::AppSecret => "app_secret",
            Namespace::Unique => "unique",
            Namespace::EmailLink => "email_link",
            Namespace::Nonce => "nonce",
            Namespace::SmsTemplate => "sms_template",
            Namespace::Sms => "sms",
            Namespace::SmsCode => "sms_code",
            Namespace::SmsQuota => "sms_quota",
            Namespace::SmsTries => "sms_tries",
            Namespace::SmsCodeIndex => "sms_code_index",
            Namespace::Captcha => "captcha",
            Namespace::CaptchaPass => "captcha_pass",
            Namespace::Tries => "tries",
            Namespace::IndexMeta => "index_meta",
            Namespace::File => "file",
            Namespace::FileGone => "file_gone",
            Namespace::Push => "push",
            Namespace::Function => "function",
            Namespace::FunctionTrigger => "function_trigger",
            Namespace::FunctionRun => "function_run",
            Namespace::Usage => "usage",
        }
    }

    /// The namespace with a stored name.
    pub fn from_name(name: &str) -> Option<Namespace> {
        Namespace::ALL.into_iter().find(|ns| ns.name() == name)
    }
}

/// How a namespace's records are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In the metadata group, which every node holds.
    Meta,
    /// Spread over the data shards by `ids::shard_for(scope, word, key)`: `scope` is the app's
    /// id, or `fixed` for records of no one app; `word` names the kind of record. Part of the
    /// on-disk layout like `shard_for` itself: it decides where existing records are, so a
    /// namespace's pair never changes.
    Shard {
        fixed: Option<&'static str>,
        word: &'static str,
    },
    /// Kept by each group of what that group holds (asked of a group, never routed).
    EachGroup,
}

impl Namespace {
    /// Where this namespace's records live.
    pub const fn placement(self) -> Placement {
        const fn app(word: &'static str) -> Placement {
            Placement::Shard { fixed: None, word }
        }
        const fn cluster(scope: &'static str, word: &'static str) -> Placement {
            Placement::Shard {
                fixed: Some(scope),
                word,
            }
        }
        match self {
            Namespace::Schema
            | Namespace::Node
            | Namespace::Cluster
            | Namespace::App
            | Namespace::Account
            | Namespace::AppSecret
            | Namespace::SmsTemplate
            | Namespace::Push
            | Namespace::Function
            | Namespace::FunctionTrigger
            | Namespace::FunctionRun => Placement::Meta,
            Namespace::Unique => app("_unique"),
            Namespace::Nonce => app("_nonce"),
            Namespace::Sms
            | Namespace::SmsCode
            | Namespace::SmsQuota
            | Namespace::SmsTries
            | Namespace::SmsCodeIndex => app("_sms"),
            Namespace::EmailLink => cluster("_links", "_email"),
            Namespace::Captcha | Namespace::CaptchaPass => cluster("_captcha", "_token"),
            Namespace::Tries => cluster("_throttle", "tries"),
            Namespace::File | Namespace::FileGone => cluster("", "_File"),
            Namespace::IndexMeta | Namespace::Usage => Placement::EachGroup,
        }
    }
}

/// The group holding the record of `ns` that `key` routes (a record's routing key, which need
/// not be its stored key: an SMS code's is the phone number) of `app` (hashed only by
/// namespaces of one app). A namespace kept by each group answers the metadata group (which
/// keeps its own).
pub fn record_group(ns: Namespace, app: &str, key: &str, shards: u32) -> GroupId {
    match ns.placement() {
        Placement::Meta | Placement::EachGroup => META_GROUP,
        Placement::Shard { fixed, word } => shard_for(fixed.unwrap_or(app), word, key, shards),
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names as data written by earlier versions holds them.
    #[test]
    fn names_are_the_stored_ones() {
        let names: Vec<&str> = Namespace::ALL.iter().map(|ns| ns.name()).collect();
        assert_eq!(
            names,
            [
                "schema",
                "node",
                "cluster",
                "app",
                "account",
                "app_secret",
                "unique",
                "email_link",
                "nonce",
                "sms_template",
                "sms",
                "sms_code",
                "sms_quota",
                "sms_tries",
                "sms_code_index",
                "captcha",
                "captcha_pass",
                "tries",
                "index_meta",
                "file",
                "file_gone",
                "push",
                "function",
                "function_trigger",
                "function_run",
                "usage",
            ]
        );
        for ns in Namespace::ALL {
            assert_eq!(Namespace::from_name(ns.name()), Some(ns));
        }
        assert_eq!(Namespace::from_name("objects"), None);
    }

    /// Records stay where earlier versions put them: each routed namespace hashes the words
    /// its records were first routed by.
    #[test]
    fn routed_records_stay_where_they_were_written() {
        let shards = 16;
        let old = |scope: &str, word: &str, key: &str| shard_for(scope, word, key, shards);
        for key in ["a", "+8613800000000", "123456", "_lookups", "x/y"] {
            let at = |ns| record_group(ns, "app1", key, shards);
            assert_eq!(at(Namespace::Unique), old("app1", "_unique", key));
            assert_eq!(at(Namespace::Nonce), old("app1", "_nonce", key));
            for ns in [
                Namespace::Sms,
                Namespace::SmsCode,
                Namespace::SmsQuota,
                Namespace::SmsTries,
                Namespace::SmsCodeIndex,
            ] {
                assert_eq!(at(ns), old("app1", "_sms", key));
            }
            assert_eq!(at(Namespace::EmailLink), old("_links", "_email", key));
            assert_eq!(at(Namespace::Captcha), old("_captcha", "_token", key));
            assert_eq!(at(Namespace::CaptchaPass), old("_captcha", "_token", key));
            assert_eq!(at(Namespace::Tries), old("_throttle", "tries", key));
            assert_eq!(at(Namespace::File), crate::ids::file_group(key, shards));
            assert_eq!(at(Namespace::Schema), META_GROUP);
        }
        // An app's records of one key land apart from another app's.
        let spread: std::collections::HashSet<GroupId> = (0..64)
            .map(|i| record_group(Namespace::Unique, &format!("app{i}"), "k", shards))
            .collect();
        assert!(spread.len() > 4, "{spread:?}");
    }
}
