//! Comparing secrets (keys, signatures) in time independent of where they differ
//! (`subtle`), so an attacker cannot find a key byte by byte from answer times.

use subtle::ConstantTimeEq;

/// Whether two secrets are equal, in constant time for equal lengths.
pub fn same_secret(a: &str, b: &str) -> bool {
    // A sealed value (`secrets`) is never a key: a record read without the secrets key must
    // not let its sealed text authenticate.
    let sealed = a.starts_with("$sealed:") || b.starts_with("$sealed:");
    !sealed && a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}
