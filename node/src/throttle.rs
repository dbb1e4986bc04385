//! Limits on how often one client may try something that invites abuse: logging in, console
//! logins, asking for SMS codes and mails.
//!
//! Two kinds, by what they key on:
//! - per account (a username, a console email, a phone number, an email address): counted
//!   cluster-wide with `TakeQuota` on the shard that owns the key, so requests racing through
//!   different nodes share one count (`take`);
//! - per client IP: counted in this node's memory (`IpLimiter`), which costs no Raft write; a
//!   client spreading its requests over N nodes gets N times the allowance.
//!
//! Logins take an attempt before the password is checked (so that racing guesses are counted
//! however they interleave) and give exactly that attempt back when the password was right
//! (`IpLimiter::refund`, `give_back`): only failures, and attempts still in flight, use up an
//! allowance. Failed logins are counted per account and client address, so a stranger who
//! fails locks out only their own address, and per account across addresses, past which a
//! login needs a captcha (`take_login`). A refused attempt answers 429 with `Retry-After`
//! (`api::error`). Neighbours: the handlers in
//! `api::users`, `api::context` (console), `api::sms` and `api::email` call these;
//! `ClientIp` reads the peer address `connections` attaches to each request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{Cluster, Error as ClusterError, QuotaWindow};

/// Wrong passwords (and attempts) per account from one client address in 15 minutes before
/// that address's logins to the account are refused.
pub const LOGIN_WINDOWS: [QuotaWindow; 1] = [QuotaWindow {
    length_ms: 15 * 60 * 1000,
    max: 10,
}];

/// Wrong passwords (and attempts) per account from all addresses together in 15 minutes
/// before logins to it need a proof that a person is trying (users: a captcha's
/// `validate_token`; console accounts, which have none, are refused).
pub const ACCOUNT_LOGIN_WINDOWS: [QuotaWindow; 1] = [QuotaWindow {
    length_ms: 15 * 60 * 1000,
    max: 100,
}];

/// How long an address a login succeeded from stays known to its account.
const KNOWN_FOR_MS: i64 = 30 * 24 * 3600 * 1000;

/// The attempts one login took: on the account from the client's address, and on the account.
pub struct LoginAttempt {
    from_address: Attempt,
    on_account: Option<Attempt>,
    /// The key recording that the account's owner logged in from this address.
    known: String,
}

/// Whether a login to the account succeeded from the address lately (the record `known`).
async fn is_known(cluster: &Cluster, known: &str) -> bool {
    let group = cluster.record_group(Namespace::Tries, known);
    matches!(
        cluster.get_record(group, Namespace::Tries, known).await,
        Ok(Some(v)) if v["known"] == serde_json::Value::Bool(true)
    )
}

impl LoginAttempt {
    /// Gives both attempts back (the password was right: only failures use up the
    /// allowances) and remembers the address as one the account's owner uses.
    pub async fn succeeded(self, cluster: &Cluster) {
        give_back(cluster, self.from_address).await;
        if let Some(a) = self.on_account {
            give_back(cluster, a).await;
        }
        if is_known(cluster, &self.known).await {
            return;
        }
        let group = cluster.record_group(Namespace::Tries, &self.known);
        let until = basalt_cluster::now_ms() + KNOWN_FOR_MS;
        let record = serde_json::json!({"known": true});
        if let Err(e) = cluster
            .put_record(group, Namespace::Tries, &self.known, record, Some(until))
            .await
        {
            tracing::debug!("remembering a login address: {e}");
        }
    }
}

/// Why a login was not even tried.
pub enum LoginRefusal {
    /// The client's address used up its allowance on the account (or a refusal of storage).
    Throttled(ThrottleError),
    /// The account used up its allowance from all addresses: a captcha is needed.
    ProofNeeded,
}

/// Counts a login attempt on `account` (a key naming the account, not the name it was asked
/// by: a user's username, email and phone share one) from `ip`, before the password is
/// checked (decisions/0031). An address that failed too often is refused on that account
/// only (`LOGIN_WINDOWS`): the owner, from elsewhere, still gets in. When the account failed
/// too often from all addresses together (`ACCOUNT_LOGIN_WINDOWS`), only an address the
/// account logged in from within 30 days, or a caller that `proved` a person is trying (a
/// captcha it took), may try — others are refused and their attempt uncounted.
pub async fn take_login(
    cluster: &Cluster,
    what: &str,
    account: &str,
    ip: Option<IpAddr>,
    proved: bool,
) -> Result<LoginAttempt, LoginRefusal> {
    // Each kind of record has a prefix of its own and the account's part is a digest of fixed
    // length: no name a client sends (a console email may hold anything) spells another
    // account's or address's key.
    let digest = {
        use sha2::Digest;
        let d = sha2::Sha256::digest(account.as_bytes());
        d.iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let address = ip.map_or_else(|| "-".to_string(), |ip| ip.to_string());
    let on_account_key = format!("login-account:{digest}");
    let known = format!("login-known:{digest}:{address}");
    let from_address = take(
        cluster,
        what,
        &format!("login-address:{digest}:{address}"),
        &LOGIN_WINDOWS,
    )
    .await
    .map_err(LoginRefusal::Throttled)?;
    match take(cluster, what, &on_account_key, &ACCOUNT_LOGIN_WINDOWS).await {
        Ok(on_account) => Ok(LoginAttempt {
            from_address,
            on_account: Some(on_account),
            known,
        }),
        Err(ThrottleError::Throttled { .. }) if proved || is_known(cluster, &known).await => {
            Ok(LoginAttempt {
                from_address,
                on_account: None,
                known,
            })
        }
        Err(ThrottleError::Throttled { .. }) => {
            give_back(cluster, from_address).await;
            Err(LoginRefusal::ProofNeeded)
        }
        Err(e) => {
            give_back(cluster, from_address).await;
            Err(LoginRefusal::Throttled(e))
        }
    }
}

/// Mails (verification or password reset, asked for or sent at sign-up) per address: 2 a
/// minute, 5 an hour, 10 a day.
pub const MAIL_WINDOWS: [QuotaWindow; 3] = [
    QuotaWindow {
        length_ms: 60 * 1000,
        max: 2,
    },
    QuotaWindow {
        length_ms: 3600 * 1000,
        max: 5,
    },
    QuotaWindow {
        length_ms: 24 * 3600 * 1000,
        max: 10,
    },
];

/// What a per-IP limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpKind {
    /// Logins of users and of console accounts (failed ones; see `refund`).
    Login,
    /// `requestSmsCode`.
    Sms,
    /// `requestPasswordReset` and `requestEmailVerify`.
    Mail,
}

impl IpKind {
    fn name(self) -> &'static str {
        match self {
            IpKind::Login => "login",
            IpKind::Sms => "sms",
            IpKind::Mail => "mail",
        }
    }
}

/// Attempts per client IP per minute on this node (0: no limit); `--login-attempts-per-ip`,
/// `--sms-requests-per-ip`, `--mail-requests-per-ip`.
#[derive(Debug, Clone, Copy)]
pub struct IpLimits {
    pub login: u32,
    pub sms: u32,
    pub mail: u32,
}

impl Default for IpLimits {
    fn default() -> Self {
        IpLimits {
            login: 30,
            sms: 5,
            mail: 10,
        }
    }
}

impl IpLimits {
    fn max(&self, kind: IpKind) -> u32 {
        match kind {
            IpKind::Login => self.login,
            IpKind::Sms => self.sms,
            IpKind::Mail => self.mail,
        }
    }
}

/// The window of every per-IP limit.
const IP_WINDOW: Duration = Duration::from_secs(60);

/// Keys kept before expired windows are swept out of memory.
const SWEEP_AT: usize = 100_000;

/// Per-client-IP attempt counts of this node, in fixed windows of a minute.
#[derive(Default)]
pub struct IpLimiter {
    limits: IpLimits,
    windows: Mutex<HashMap<(IpKind, IpAddr), (Instant, u32)>>,
}

impl IpLimiter {
    pub fn new(limits: IpLimits) -> Self {
        IpLimiter {
            limits,
            windows: Mutex::default(),
        }
    }

    /// Counts one attempt of `ip` of `kind`; 429 (`Throttled`) when its window is full.
    /// Requests without a client address (made inside the node) are not counted.
    pub fn take(&self, kind: IpKind, ip: Option<IpAddr>) -> Result<(), ThrottleError> {
        let max = self.limits.max(kind);
        let Some(ip) = ip.filter(|_| max > 0) else {
            return Ok(());
        };
        let now = Instant::now();
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if w.len() >= SWEEP_AT {
            w.retain(|_, (start, _)| now.duration_since(*start) < Duration::from_secs(3600));
        }
        let (start, count) = w.entry((kind, ip)).or_insert((now, 0));
        if now.duration_since(*start) >= IP_WINDOW {
            *start = now;
            *count = 0;
        }
        if *count >= max {
            let retry = IP_WINDOW.saturating_sub(now.duration_since(*start));
            metrics::counter!("basalt_throttled_total", "limit" => kind.name(), "key" => "ip")
                .increment(1);
            return Err(ThrottleError::Throttled {
                what: format!("{} attempts from this address", kind.name()),
                retry_after_secs: retry.as_secs().max(1),
            });
        }
        *count += 1;
        Ok(())
    }

    /// Gives back an attempt counted by `take` that turned out well (a right password), so
    /// that only failures use up the allowance.
    pub fn refund(&self, kind: IpKind, ip: Option<IpAddr>) {
        let Some(ip) = ip else {
            return;
        };
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, count)) = w.get_mut(&(kind, ip)) {
            *count = count.saturating_sub(1);
        }
    }
}

/// Why an attempt was refused: its window is full (429 with `Retry-After`), or the cluster
/// could not count it.
#[derive(Debug, thiserror::Error)]
pub enum ThrottleError {
    /// `what` names the limit; the window has room again in `retry_after_secs`.
    #[error("too many {what}; try again in {retry_after_secs} s.")]
    Throttled { what: String, retry_after_secs: u64 },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// One attempt counted by `take`, which `give_back` uncounts.
#[derive(Debug, Clone)]
pub struct Attempt {
    key: String,
    at_ms: i64,
}

/// Counts one attempt on `key` under `windows` cluster-wide (on the shard owning the key);
/// 429 (`Throttled`) when a window is full. Racing attempts through any nodes are counted in
/// one `TakeQuota` record, so no more than a window's allowance are ever in flight.
pub async fn take(
    cluster: &Cluster,
    what: &str,
    key: &str,
    windows: &[QuotaWindow],
) -> Result<Attempt, ThrottleError> {
    let group = cluster.record_group(Namespace::Tries, key);
    match cluster
        .take_quota(group, Namespace::Tries, key, windows.to_vec())
        .await
    {
        Ok(at_ms) => Ok(Attempt {
            key: key.to_string(),
            at_ms,
        }),
        Err(ClusterError::QuotaExceeded(_)) => {
            metrics::counter!("basalt_throttled_total", "limit" => what.to_string(), "key" => "account")
                .increment(1);
            let shortest = windows.iter().map(|w| w.length_ms).min().unwrap_or(60_000);
            Err(ThrottleError::Throttled {
                what: format!("{what} attempts"),
                retry_after_secs: u64::try_from(shortest / 1000).unwrap_or(60).max(1),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Uncounts an attempt that turned out well (a right password): only failures use up the
/// allowance. Best effort: a failure here leaves one attempt counted until its window passes.
pub async fn give_back(cluster: &Cluster, attempt: Attempt) {
    let group = cluster.record_group(Namespace::Tries, &attempt.key);
    if let Err(e) = cluster
        .return_quota(group, Namespace::Tries, &attempt.key, attempt.at_ms)
        .await
    {
        tracing::debug!("giving back a login attempt: {e}");
    }
}

/// The client's IP address (absent for requests made inside the node).
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ip_gets_its_allowance_per_window() {
        let l = IpLimiter::new(IpLimits {
            login: 3,
            sms: 0,
            mail: 1,
        });
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..3 {
            assert!(l.take(IpKind::Login, a).is_ok());
        }
        assert!(matches!(
            l.take(IpKind::Login, a),
            Err(ThrottleError::Throttled { .. })
        ));
        assert!(l.take(IpKind::Login, b).is_ok());
        assert!(l.take(IpKind::Login, None).is_ok());
        l.refund(IpKind::Login, a);
        assert!(l.take(IpKind::Login, a).is_ok());
        assert!(l.take(IpKind::Login, a).is_err());
        // 0 is no limit; kinds count apart.
        for _ in 0..100 {
            assert!(l.take(IpKind::Sms, a).is_ok());
        }
        assert!(l.take(IpKind::Mail, a).is_ok());
        assert!(l.take(IpKind::Mail, a).is_err());
    }
}
