//! Password hashing for console accounts and app users: argon2 (PHC strings with their own
//! salt), never plain text. Hashing and verifying are CPU-heavy on purpose: async callers use
//! `hash` and `verify`, which run them on the blocking pool, at most `max(1, cores / 2)` at a
//! time, so a burst of logins or registrations queues instead of starving the Raft tasks of
//! CPU (which would cost the groups their leaders).

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use tokio::sync::Semaphore;

/// A failure of the password machinery itself (never a wrong password: that is `false`).
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("password hashing failed: {0}")]
    Hashing(String),
    #[error("password worker pool: {0}")]
    Worker(String),
}

fn workers() -> &'static Semaphore {
    static WORKERS: OnceLock<Semaphore> = OnceLock::new();
    WORKERS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Semaphore::new((cores / 2).max(1))
    })
}

/// Runs CPU-heavy password work on the blocking pool, within the concurrency bound.
async fn bounded<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PasswordError> {
    let _permit = workers()
        .acquire()
        .await
        .map_err(|e| PasswordError::Worker(e.to_string()))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| PasswordError::Worker(e.to_string()))
}

/// `hash_password` for async callers.
pub async fn hash(password: String) -> Result<String, PasswordError> {
    bounded(move || hash_password(&password)).await?
}

/// `verify_password` for async callers.
pub async fn verify(password: String, hash: String) -> Result<bool, PasswordError> {
    bounded(move || verify_password(&password, &hash)).await
}

/// Spends the time of a real verification for an account that does not exist and answers
/// false, so that a wrong password and an unknown account take the same time (a faster
/// answer would tell which usernames and console emails exist).
pub async fn verify_absent(password: String) -> Result<bool, PasswordError> {
    static STAND_IN: OnceLock<String> = OnceLock::new();
    bounded(move || {
        let hash = match STAND_IN.get() {
            Some(h) => h.clone(),
            None => {
                let h = hash_password("no account has this password")?;
                STAND_IN.get_or_init(|| h).clone()
            }
        };
        verify_password(&password, &hash);
        Ok(false)
    })
    .await?
}

pub fn hash_password(password: &str) -> Result<String, PasswordError> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| PasswordError::Hashing(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hashing(e.to_string()))
}

pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hashed_and_verified() {
        let h = hash_password("s3cret").unwrap();
        assert!(!h.contains("s3cret"));
        assert!(verify_password("s3cret", &h));
        assert!(!verify_password("wrong", &h));
        assert!(!verify_password("s3cret", "not a hash"));
    }
}
