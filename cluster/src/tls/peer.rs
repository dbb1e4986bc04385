//! `PeerTls`: the mutual TLS of node-to-node links (decisions/0031). It holds the current
//! server and client configurations built from a node's (or an admin's) [`CertFiles`] and
//! swaps them whole on [`PeerTls::reload`]; connections opened after a reload use the new
//! ones, those already open keep theirs. Both sides accept only certificates the CA bundle
//! signed: the server asks every client for one, the client checks the server's name
//! (`identity::node_name`), and the peer services check the client's identity per request.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::{ServerName, UnixTime};

use super::identity::{identity_of, node_name, PeerIdentity};
use super::material::{CertFiles, Material};
use super::TlsError;

/// The cryptography every TLS configuration of Basalt uses (ring: no C toolchain beyond what
/// the build has, and never the process-wide default another crate might install), with
/// AES-128-GCM preferred: as strong as the handshake's P-256 keys, and the cheapest suite on
/// CPUs with AES instructions (peer links carry every write and forwarded read).
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|s| {
        use rustls::CipherSuite::*;
        match s.suite() {
            TLS13_AES_128_GCM_SHA256 => 0,
            TLS13_AES_256_GCM_SHA384 => 1,
            TLS13_CHACHA20_POLY1305_SHA256 => 2,
            _ => 3,
        }
    });
    Arc::new(provider)
}

/// The ALPN protocol of node-to-node gRPC.
const H2: &[u8] = b"h2";

/// The configurations built from one load of the files.
struct Configs {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// The mutual TLS of this process's peer links, reloadable.
pub struct PeerTls {
    files: CertFiles,
    /// Who the certificate must name: this node, or an admin.
    identity: PeerIdentity,
    current: ArcSwap<Configs>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls")
            .field("files", &self.files)
            .field("identity", &self.identity)
            .finish()
    }
}

impl PeerTls {
    /// Loads `files`, which must hold a certificate naming `identity` that the bundle's CAs
    /// signed and that is valid now.
    pub fn load(files: CertFiles, identity: PeerIdentity) -> Result<PeerTls, TlsError> {
        let configs = build(&files, identity)?;
        Ok(PeerTls {
            files,
            identity,
            current: ArcSwap::from_pointee(configs),
        })
    }

    /// Reads the files again; on any fault the configurations in use stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let result = build(&self.files, self.identity);
        let outcome = if result.is_ok() { "ok" } else { "failed" };
        metrics::counter!("basalt_tls_reloads_total", "listener" => "peer", "result" => outcome)
            .increment(1);
        self.current.store(Arc::new(result?));
        Ok(())
    }

    /// Who this process's certificate names.
    pub fn identity(&self) -> PeerIdentity {
        self.identity
    }

    /// The configuration the peer server accepts connections with.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.load().server)
    }

    /// The configuration connections to peers are opened with.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        Arc::clone(&self.current.load().client)
    }
}

/// The name a client verifies on the server it dials: a given node's, or any node's.
pub fn server_name(node: Option<crate::ids::NodeId>) -> Result<ServerName<'static>, TlsError> {
    let name = match node {
        Some(id) => node_name(id),
        None => super::identity::ANY_NODE_NAME.to_string(),
    };
    ServerName::try_from(name).map_err(|e| TlsError::Certificate(e.to_string()))
}

fn build(files: &CertFiles, identity: PeerIdentity) -> Result<Configs, TlsError> {
    let material = Material::load(files)?;
    let provider = provider();
    let named = identity_of(material.leaf())?;
    if named != identity {
        return Err(TlsError::WrongIdentity {
            path: files.cert.clone(),
            named: named.to_string(),
            want: identity.to_string(),
        });
    }
    // A certificate a CA revoked is refused; one of a CA without a list (the other CA of a
    // rotation bundle) is not refused for that.
    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::clone(&material.roots), provider.clone())
            .with_crls(material.crls.clone())
            .only_check_end_entity_revocation()
            .allow_unknown_revocation_status()
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let server_verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::clone(&material.roots), provider.clone())
            .with_crls(material.crls.clone())
            .only_check_end_entity_revocation()
            .allow_unknown_revocation_status()
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
    // The certificate must pass the checks its peers will make, so a bad file is refused here
    // (at start, or by a reload that then keeps the old one) rather than by every peer.
    let now = UnixTime::now();
    let (leaf, intermediates) = (material.leaf(), &material.chain[1..]);
    client_verifier
        .verify_client_cert(leaf, intermediates, now)
        .map_err(|e| TlsError::Rejected {
            path: files.cert.clone(),
            reason: e.to_string(),
        })?;
    if let PeerIdentity::Node(id) = identity {
        server_verifier
            .verify_server_cert(leaf, intermediates, &server_name(Some(id))?, &[], now)
            .map_err(|e| TlsError::Rejected {
                path: files.cert.clone(),
                reason: e.to_string(),
            })?;
    }
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(material.chain.clone(), material.key.clone_key())
        .map_err(|e| TlsError::key(&files.key, e))?;
    server.alpn_protocols = vec![H2.to_vec()];
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_webpki_verifier(server_verifier)
        .with_client_auth_cert(material.chain.clone(), material.key.clone_key())
        .map_err(|e| TlsError::key(&files.key, e))?;
    client.alpn_protocols = vec![H2.to_vec()];
    material.record_expiry("peer");
    Ok(Configs {
        server: Arc::new(server),
        client: Arc::new(client),
    })
}
