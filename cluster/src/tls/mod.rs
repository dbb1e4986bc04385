//! TLS for the links between nodes (decisions/0031): certificates of the cluster's own CA
//! (`issue`: made by `basalt admin certs`), read from PEM files (`material`), the identity
//! each names (`identity`: a node id, or an admin), and the reloadable mutual TLS of peer links
//! (`peer`). A leaf of the crate: `rpc` dials with it, `peer_service` accepts with it and
//! checks each caller's identity; the node crate reads its HTTPS certificate with `material`.

pub mod identity;
pub mod issue;
pub mod material;
pub mod peer;

use std::path::{Path, PathBuf};

pub use identity::{IdentityError, PeerIdentity};
pub use material::CertFiles;
pub use peer::PeerTls;

/// What went wrong reading, checking or making certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("{path}: no {what} in the file")]
    Missing { path: PathBuf, what: &'static str },
    #[error("bad certificate: {0}")]
    Certificate(String),
    #[error("{path}: the private key does not fit the certificate or cannot be used: {message}")]
    Key { path: PathBuf, message: String },
    #[error("{path} names {named}, not {want}")]
    WrongIdentity {
        path: PathBuf,
        named: String,
        want: String,
    },
    #[error("{path} would be refused by peers: {reason}")]
    Rejected { path: PathBuf, reason: String },
    #[error("{0}")]
    Identity(#[from] IdentityError),
    #[error("building the certificate verifier: {0}")]
    Verifier(String),
    #[error("TLS: {0}")]
    Rustls(rustls::Error),
    #[error("making a certificate: {0}")]
    Issue(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} exists already: not overwritten")]
    Exists { path: PathBuf },
}

impl TlsError {
    pub(crate) fn pem(path: &Path, e: impl std::fmt::Display) -> TlsError {
        TlsError::Pem {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }

    pub(crate) fn key(path: &Path, e: impl std::fmt::Display) -> TlsError {
        TlsError::Key {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> TlsError {
        TlsError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
