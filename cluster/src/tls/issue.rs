//! Making the cluster's certificates (`basalt admin certs`, and `basalt dev` on first start):
//! a CA of the cluster's own, node certificates naming a node id (`identity`) and the
//! addresses it is reached at, and administrator certificates. Keys are ECDSA P-256; files are
//! written with mode 0600, through a temporary file and a rename, so a node reloading them
//! never reads half a file. A CA key is never overwritten.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use x509_parser::prelude::X509Certificate;

use super::identity::{node_name, ADMIN_NAME, ANY_NODE_NAME};
use super::TlsError;
use crate::ids::NodeId;

const DAY: Duration = Duration::from_secs(86_400);

/// How long a certificate is valid from now (it is valid from an hour ago, for clocks a little
/// behind).
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    days: u64,
}

impl Validity {
    pub fn days(days: u64) -> Validity {
        Validity { days: days.max(1) }
    }

    fn apply(self, params: &mut CertificateParams) {
        let now = SystemTime::now();
        params.not_before = (now - Duration::from_secs(3600)).into();
        params.not_after = (now + DAY * u32::try_from(self.days).unwrap_or(u32::MAX)).into();
    }
}

fn issue_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Issue(e.to_string())
}

/// A certificate just made, with its key.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    der: CertificateDer<'static>,
}

impl Issued {
    pub fn cert_der(&self) -> &[u8] {
        &self.der
    }

    /// Writes the certificate and key into `dir` (replacing earlier ones: a renewal).
    pub fn write(&self, dir: &Path, cert_file: &str, key_file: &str) -> Result<(), TlsError> {
        write_private(&dir.join(cert_file), self.cert_pem.as_bytes(), true)?;
        write_private(&dir.join(key_file), self.key_pem.as_bytes(), true)
    }
}

/// A certificate authority whose key is at hand: it signs node and admin certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

impl Authority {
    /// A new CA. Its name carries a random part, so an old and a new CA of one cluster (a
    /// rotation) never share a name.
    pub fn create(validity: Validity) -> Result<Authority, TlsError> {
        let key = KeyPair::generate().map_err(issue_error)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Basalt");
        dn.push(
            DnType::CommonName,
            format!("Basalt cluster CA {:08x}", rand::random::<u32>()),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity.apply(&mut params);
        let cert = params.self_signed(&key).map_err(issue_error)?;
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key).map_err(issue_error)?;
        Ok(Authority {
            issuer,
            cert_pem,
            key_pem,
        })
    }

    /// The CA whose certificate (the first in `cert`) and key are in these PEM files.
    pub fn load(cert: &Path, key: &Path) -> Result<Authority, TlsError> {
        let cert_pem = std::fs::read_to_string(cert).map_err(|e| TlsError::io(cert, e))?;
        let key_pem = std::fs::read_to_string(key).map_err(|e| TlsError::io(key, e))?;
        let pair = KeyPair::from_pem(&key_pem).map_err(|e| TlsError::key(key, e))?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, pair).map_err(issue_error)?;
        let authority = Authority {
            issuer,
            cert_pem,
            key_pem,
        };
        // The key must be the certificate's: sign a throwaway certificate and check it.
        let probe = authority.issue_admin(Validity::days(1))?;
        let bundle = super::material::read_certs(cert)?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in bundle.into_iter().take(1) {
            roots
                .add(ca)
                .map_err(|e| TlsError::Certificate(e.to_string()))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            super::peer::provider(),
        )
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
        verifier
            .verify_client_cert(&probe.der, &[], rustls_pki_types::UnixTime::now())
            .map_err(|e| TlsError::key(key, e))?;
        Ok(authority)
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A revocation list naming `revoked` (serial numbers, with when each was revoked, Unix
    /// seconds), signed by this CA and valid `validity` from now, as PEM.
    pub fn revocation_list(
        &self,
        revoked: &[(Vec<u8>, i64)],
        number: u64,
        validity: Validity,
    ) -> Result<String, TlsError> {
        let now = SystemTime::now();
        let at = |secs: i64| -> SystemTime {
            std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
        };
        let params = rcgen::CertificateRevocationListParams {
            this_update: now.into(),
            next_update: (now + DAY * u32::try_from(validity.days).unwrap_or(u32::MAX)).into(),
            crl_number: rcgen::SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|(serial, when)| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from_slice(serial),
                    revocation_time: at(*when).into(),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        params
            .signed_by(&self.issuer)
            .and_then(|crl| crl.pem())
            .map_err(issue_error)
    }

    /// Writes `ca.pem` and `ca.key` into `dir`; refuses to replace a CA key.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf), TlsError> {
        std::fs::create_dir_all(dir).map_err(|e| TlsError::io(dir, e))?;
        let (cert, key) = (dir.join(CA_KEY_CERT), dir.join(CA_KEY_FILE));
        if key.exists() {
            return Err(TlsError::Exists { path: key });
        }
        write_private(&key, self.key_pem.as_bytes(), false)?;
        write_private(&cert, self.cert_pem.as_bytes(), true)?;
        Ok((cert, key))
    }

    fn issue(
        &self,
        common_name: &str,
        names: Vec<String>,
        usages: &[ExtendedKeyUsagePurpose],
        validity: Validity,
    ) -> Result<Issued, TlsError> {
        let mut params = CertificateParams::new(names).map_err(issue_error)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Basalt");
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::NoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages.to_vec();
        params.use_authority_key_identifier_extension = true;
        validity.apply(&mut params);
        let key = KeyPair::generate().map_err(issue_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(issue_error)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        })
    }

    /// A certificate for node `id`, reachable at `addrs` (`host[:port]`: each host goes in as
    /// an IP address or DNS name, for tools that verify by address; peers verify the node id).
    pub fn issue_node(
        &self,
        id: NodeId,
        addrs: &[String],
        validity: Validity,
    ) -> Result<Issued, TlsError> {
        if id.get() == 0 {
            return Err(TlsError::Issue("node ids start at 1".into()));
        }
        let mut names = vec![node_name(id), ANY_NODE_NAME.to_string()];
        for addr in addrs {
            let host = host_of(addr)?;
            if !names.contains(&host) {
                names.push(host);
            }
        }
        self.issue(
            &format!("basalt node {id}"),
            names,
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            validity,
        )
    }

    /// A certificate for an administrator (`basalt admin`): a client certificate only.
    pub fn issue_admin(&self, validity: Validity) -> Result<Issued, TlsError> {
        self.issue(
            "basalt admin",
            vec![ADMIN_NAME.to_string()],
            &[ExtendedKeyUsagePurpose::ClientAuth],
            validity,
        )
    }
}

/// The revocation list a CA directory keeps (`revoke`), to copy into nodes' certificates
/// directories as `crl.pem`.
pub const CA_CRL_FILE: &str = "crl.pem";

/// Revokes the certificates in the PEM files `certs` by the CA of `ca_dir`: its revocation
/// list (`crl.pem` there) gets their serial numbers beside those it named before, a higher
/// number and a new signature. Answers the list's path.
pub fn revoke(ca_dir: &Path, certs: &[PathBuf]) -> Result<PathBuf, TlsError> {
    use x509_parser::prelude::FromDer;
    let ca = Authority::load(&ca_dir.join(CA_KEY_CERT), &ca_dir.join(CA_KEY_FILE))?;
    let crl_path = ca_dir.join(CA_CRL_FILE);
    let mut revoked: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut number = 1u64;
    if crl_path.exists() {
        for der in rustls_pki_types::CertificateRevocationListDer::pem_file_iter(&crl_path)
            .map_err(|e| TlsError::pem(&crl_path, e))?
        {
            let der = der.map_err(|e| TlsError::pem(&crl_path, e))?;
            let (_, crl) = x509_parser::revocation_list::CertificateRevocationList::from_der(&der)
                .map_err(|e| TlsError::Certificate(format!("{}: {e}", crl_path.display())))?;
            for r in crl.iter_revoked_certificates() {
                revoked.push((r.raw_serial().to_vec(), r.revocation_date.timestamp()));
            }
            let seen = crl
                .crl_number()
                .and_then(|n| n.to_u64_digits().first().copied())
                .unwrap_or(0);
            number = number.max(seen + 1);
        }
    }
    let now = chrono::Utc::now().timestamp();
    for path in certs {
        for der in super::material::read_certs(path)?.into_iter().take(1) {
            let (_, cert) = X509Certificate::from_der(&der)
                .map_err(|e| TlsError::Certificate(format!("{}: {e}", path.display())))?;
            let serial = cert.raw_serial().to_vec();
            if !revoked.iter().any(|(s, _)| *s == serial) {
                revoked.push((serial, now));
            }
        }
    }
    let pem = ca.revocation_list(&revoked, number, Validity::days(3650))?;
    write_private(&crl_path, pem.as_bytes(), true)?;
    Ok(crl_path)
}

/// The CA certificate and key in a CA directory.
pub const CA_KEY_CERT: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca.key";

/// The host of `host`, `host:port`, `ip:port` or `[v6]:port`.
fn host_of(addr: &str) -> Result<String, TlsError> {
    let addr = addr.trim();
    if let Ok(sock) = addr.parse::<std::net::SocketAddr>() {
        return Ok(sock.ip().to_string());
    }
    if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
        return Ok(ip.to_string());
    }
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == ':');
    let host = host.to_ascii_lowercase();
    if host.ends_with(super::identity::NAME_SUFFIX) {
        return Err(TlsError::Issue(format!(
            "{addr:?}: names under {} are identities, not addresses",
            super::identity::NAME_SUFFIX
        )));
    }
    if ok {
        Ok(host)
    } else {
        Err(TlsError::Issue(format!(
            "{addr:?} is not a host or address"
        )))
    }
}

/// Writes `bytes` to `path` with mode 0600, through a temporary file renamed over it.
pub fn write_private(path: &Path, bytes: &[u8], replace: bool) -> Result<(), TlsError> {
    if !replace && path.exists() {
        return Err(TlsError::Exists {
            path: path.to_path_buf(),
        });
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| TlsError::io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.{:08x}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("pem"),
        rand::random::<u32>()
    ));
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut f = options.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(TlsError::io(path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_taken_from_addresses() {
        assert_eq!(host_of("10.0.0.3:9080").expect("ip:port"), "10.0.0.3");
        assert_eq!(host_of("[::1]:9080").expect("v6"), "::1");
        assert_eq!(
            host_of("db-3.example.com:9080").expect("dns"),
            "db-3.example.com"
        );
        assert_eq!(
            host_of("DB-3.example.com").expect("bare"),
            "db-3.example.com"
        );
        assert!(host_of("a b:1").is_err());
        assert!(
            host_of("node-3.basalt.internal:9080").is_err(),
            "an identity is no address"
        );
        assert!(host_of("admin.basalt.internal").is_err());
    }

    #[test]
    fn a_ca_loaded_from_its_files_signs_certificates_its_bundle_accepts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Authority::create(Validity::days(10)).expect("ca");
        let (cert, key) = ca.write(dir.path()).expect("write");
        assert!(matches!(ca.write(dir.path()), Err(TlsError::Exists { .. })));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).expect("key").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let loaded = Authority::load(&cert, &key).expect("load");
        let node = loaded
            .issue_node(NodeId::new(2), &["127.0.0.1:1".into()], Validity::days(1))
            .expect("node");
        node.write(dir.path(), "node.pem", "node.key")
            .expect("write node");
        std::fs::copy(&cert, dir.path().join("bundle.pem")).expect("copy");
        let files = crate::tls::CertFiles {
            ca: dir.path().join("bundle.pem"),
            cert: dir.path().join("node.pem"),
            key: dir.path().join("node.key"),
            crl: dir.path().join("crl.pem"),
        };
        crate::tls::PeerTls::load(
            files.clone(),
            crate::tls::PeerIdentity::Node(NodeId::new(2)),
        )
        .expect("node 2 loads its certificate");
        let wrong =
            crate::tls::PeerTls::load(files, crate::tls::PeerIdentity::Node(NodeId::new(3)));
        assert!(matches!(wrong, Err(TlsError::WrongIdentity { .. })));
        // Another CA's key does not pass for this one.
        let other = Authority::create(Validity::days(10)).expect("other");
        let other_dir = tempfile::tempdir().expect("tempdir");
        let (_, other_key) = other.write(other_dir.path()).expect("write other");
        assert!(Authority::load(&cert, &other_key).is_err());
    }
}
