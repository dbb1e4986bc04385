//! Password hashing for console accounts and app users: argon2 (PHC strings with their own
//! salt), never plain text. Verification is CPU-heavy: async callers run it with
//! `spawn_blocking`.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::api::error::ApiError;

pub fn hash_password(password: &str) -> Result<String, ApiError> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| ApiError::Internal(e.to_string()))
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
