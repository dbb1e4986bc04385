//! Emailed links (spec 3, 4.5): email verification (valid one week) and password reset (valid
//! one day). A link's token names a record (namespace `email_link`, in the shard that owns the
//! token) holding the app, user, email and purpose, expiring with the link; the TTL sweep of the
//! leader-elected scheduler removes expired ones. A link works once.

use crate::throttle::MAIL_WINDOWS;
use basalt_cluster::ids::GroupId;
use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::namespace::Namespace;
use basalt_cluster::object::random_alphanumeric;
use basalt_cluster::{now_ms, Cluster};
use serde::{Deserialize, Serialize};

use super::UsersError;
use crate::mail::{Mail, Mailer};

/// How long a verification link works (spec 8).
pub const VERIFY_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
/// How long a password-reset link works.
pub const RESET_TTL_MS: i64 = 24 * 3600 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Purpose {
    Verify,
    Reset,
}

impl Purpose {
    fn path(self) -> &'static str {
        match self {
            Purpose::Verify => "verify",
            Purpose::Reset => "reset",
        }
    }
}

/// What a link's record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmailLink {
    pub app: AppId,
    pub user_id: ObjectId,
    pub email: String,
    pub purpose: Purpose,
}

fn group(cluster: &Cluster, token: &str) -> GroupId {
    cluster.record_group(Namespace::EmailLink, token)
}

/// Stores a link and mails it.
pub async fn send_link(
    cluster: &Cluster,
    mailer: &dyn Mailer,
    public_url: &str,
    app_name: &str,
    link: EmailLink,
) -> Result<(), UsersError> {
    // However the mail was asked for (a request, a sign-up, an email change), one address gets
    // at most `MAIL_WINDOWS` mails, counted cluster-wide.
    let to = format!("{}/mail/{}", link.app, link.email.trim().to_lowercase());
    crate::throttle::take(cluster, "mails to this address", &to, &MAIL_WINDOWS).await?;
    let token = random_alphanumeric(32);
    let ttl = match link.purpose {
        Purpose::Verify => VERIFY_TTL_MS,
        Purpose::Reset => RESET_TTL_MS,
    };
    let value = serde_json::to_value(&link).map_err(|source| UsersError::Encoding {
        what: "encoding an email link",
        source,
    })?;
    cluster
        .put_record(
            group(cluster, &token),
            Namespace::EmailLink,
            &token,
            value,
            Some(now_ms() + ttl),
        )
        .await?;
    let url = format!(
        "{}/email/{}/{token}",
        public_url.trim_end_matches('/'),
        link.purpose.path()
    );
    let (subject, body) = match link.purpose {
        Purpose::Verify => (
            format!("Verify your email for {app_name}"),
            format!(
                "Follow this link within a week to verify {}:\n\n{url}\n",
                link.email
            ),
        ),
        Purpose::Reset => (
            format!("Reset your password for {app_name}"),
            format!("Follow this link within a day to choose a new password:\n\n{url}\n"),
        ),
    };
    mailer
        .send(Mail {
            to: link.email,
            subject,
            body,
        })
        .await
        .map_err(|e| UsersError::Mail(e.to_string()))
}

/// The live link of a token, if it has that purpose.
pub async fn find_link(
    cluster: &Cluster,
    token: &str,
    purpose: Purpose,
) -> Result<Option<EmailLink>, UsersError> {
    if token.len() != 32 || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(None);
    }
    let rec = cluster
        .get_record(group(cluster, token), Namespace::EmailLink, token)
        .await?;
    Ok(rec
        .and_then(|v| serde_json::from_value::<EmailLink>(v).ok())
        .filter(|l| l.purpose == purpose))
}

/// Uses up a live link of that purpose: of any number of requests following one link, through
/// any nodes, exactly one gets it (`TakeRecord` deletes and answers it in one command).
pub async fn take_link(
    cluster: &Cluster,
    token: &str,
    purpose: Purpose,
) -> Result<Option<EmailLink>, UsersError> {
    // A link of the other purpose is left alone (taking it would destroy it).
    if find_link(cluster, token, purpose).await?.is_none() {
        return Ok(None);
    }
    let rec = cluster
        .take_record(group(cluster, token), Namespace::EmailLink, token)
        .await?;
    Ok(rec
        .and_then(|v| serde_json::from_value::<EmailLink>(v).ok())
        .filter(|l| l.purpose == purpose))
}
