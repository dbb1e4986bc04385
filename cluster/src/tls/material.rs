//! Certificates and keys read from PEM files: the trusted CA bundle (one CA, or old and new
//! during a rotation), a certificate chain and its private key. Read whole at start and again
//! on every reload (SIGHUP); a reload that fails keeps what was loaded before. Each load sets
//! the expiry metric of what it read, so an alert can fire before a certificate lapses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::TlsError;

/// Where a TLS identity's three files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// PEM certificates of the CAs whose signatures are accepted (a bundle during rotation).
    pub ca: PathBuf,
    /// PEM certificate chain presented to the other end, leaf first.
    pub cert: PathBuf,
    /// PEM private key of the leaf certificate (PKCS#8, SEC1 or PKCS#1).
    pub key: PathBuf,
    /// PEM certificate revocation lists of the CAs (`basalt admin certs revoke`), when the
    /// file exists: certificates they name are refused.
    pub crl: PathBuf,
}

/// The CA bundle of a certificates directory.
pub const CA_FILE: &str = "ca.pem";
/// A node's certificate and key in its certificates directory.
pub const NODE_CERT_FILE: &str = "node.pem";
pub const NODE_KEY_FILE: &str = "node.key";
/// The revocation lists in a certificates directory (optional).
pub const CRL_FILE: &str = "crl.pem";
/// An administrator's certificate and key in theirs.
pub const ADMIN_CERT_FILE: &str = "admin.pem";
pub const ADMIN_KEY_FILE: &str = "admin.key";

impl CertFiles {
    /// A node's files in its certificates directory (`--certs-dir`).
    pub fn node_in(dir: &Path) -> CertFiles {
        CertFiles {
            ca: dir.join(CA_FILE),
            cert: dir.join(NODE_CERT_FILE),
            key: dir.join(NODE_KEY_FILE),
            crl: dir.join(CRL_FILE),
        }
    }

    /// An administrator's files in their certificates directory.
    pub fn admin_in(dir: &Path) -> CertFiles {
        CertFiles {
            ca: dir.join(CA_FILE),
            cert: dir.join(ADMIN_CERT_FILE),
            key: dir.join(ADMIN_KEY_FILE),
            crl: dir.join(CRL_FILE),
        }
    }
}

/// What was read from a set of [`CertFiles`].
pub struct Material {
    /// The trusted CAs.
    pub roots: Arc<RootCertStore>,
    /// The chain to present, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// Revocation lists of the trusted CAs (none when the directory has no `crl.pem`).
    pub crls: Vec<CertificateRevocationListDer<'static>>,
    /// When the leaf certificate lapses (Unix seconds).
    pub leaf_not_after: i64,
    /// When the first of the trusted CAs lapses (Unix seconds).
    pub ca_not_after: i64,
}

impl Clone for Material {
    fn clone(&self) -> Self {
        Material {
            roots: Arc::clone(&self.roots),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            crls: self.crls.clone(),
            leaf_not_after: self.leaf_not_after,
            ca_not_after: self.ca_not_after,
        }
    }
}

/// Every certificate of a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::pem(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::pem(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::pem(path, e))
}

/// When a certificate lapses (Unix seconds).
pub fn not_after(der: &[u8]) -> Result<i64, TlsError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| TlsError::Certificate(e.to_string()))?;
    Ok(cert.validity().not_after.timestamp())
}

impl Material {
    /// Reads the three files.
    pub fn load(files: &CertFiles) -> Result<Material, TlsError> {
        let cas = read_certs(&files.ca)?;
        let mut roots = RootCertStore::empty();
        let mut ca_not_after = i64::MAX;
        for ca in &cas {
            let (_, parsed) = X509Certificate::from_der(ca)
                .map_err(|e| TlsError::Certificate(format!("{}: {e}", files.ca.display())))?;
            if !parsed.is_ca() {
                return Err(TlsError::Certificate(format!(
                    "{}: holds a certificate that is not a CA's ({})",
                    files.ca.display(),
                    parsed.subject()
                )));
            }
            roots
                .add(ca.clone())
                .map_err(|e| TlsError::Certificate(format!("{}: {e}", files.ca.display())))?;
            ca_not_after = ca_not_after.min(parsed.validity().not_after.timestamp());
        }
        let chain = read_certs(&files.cert)?;
        let leaf_not_after = not_after(&chain[0])?;
        let key = read_key(&files.key)?;
        let crls = match files.crl.exists() {
            true => CertificateRevocationListDer::pem_file_iter(&files.crl)
                .map_err(|e| TlsError::pem(&files.crl, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsError::pem(&files.crl, e))?,
            false => Vec::new(),
        };
        Ok(Material {
            roots: Arc::new(roots),
            chain,
            key,
            crls,
            leaf_not_after,
            ca_not_after,
        })
    }

    /// The leaf certificate.
    pub fn leaf(&self) -> &CertificateDer<'static> {
        &self.chain[0]
    }

    /// Sets `basalt_tls_certificate_expiry_timestamp_seconds{listener, cert}` for what was read.
    pub fn record_expiry(&self, listener: &'static str) {
        metrics::gauge!(
            "basalt_tls_certificate_expiry_timestamp_seconds",
            "listener" => listener,
            "cert" => "leaf"
        )
        .set(self.leaf_not_after as f64);
        metrics::gauge!(
            "basalt_tls_certificate_expiry_timestamp_seconds",
            "listener" => listener,
            "cert" => "ca"
        )
        .set(self.ca_not_after as f64);
    }
}
