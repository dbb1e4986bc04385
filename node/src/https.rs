//! HTTPS for clients (`--tls-cert`, `--tls-key`; decisions/0031): the certificate chain and key
//! read from PEM files into a rustls server configuration (ring, TLS 1.2 and 1.3, ALPN `h2`
//! then `http/1.1`), swapped whole on [`ServingTls::reload`] (SIGHUP) — a reload that fails
//! keeps the configuration in use. `connections` accepts each connection with the current one.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use basalt_cluster::tls::material::{not_after, read_certs, read_key};
use basalt_cluster::tls::peer::provider;
use basalt_cluster::tls::TlsError;
use rustls::ServerConfig;

/// The certificate the API is served with, reloadable.
pub struct ServingTls {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<ServerConfig>,
}

impl ServingTls {
    pub fn load(cert: PathBuf, key: PathBuf) -> Result<ServingTls, TlsError> {
        let config = build(&cert, &key)?;
        Ok(ServingTls {
            cert,
            key,
            current: ArcSwap::from_pointee(config),
        })
    }

    /// Reads the files again; on any fault the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let result = build(&self.cert, &self.key);
        let outcome = if result.is_ok() { "ok" } else { "failed" };
        metrics::counter!("basalt_tls_reloads_total", "listener" => "https", "result" => outcome)
            .increment(1);
        self.current.store(Arc::new(result?));
        Ok(())
    }

    /// The configuration new connections are accepted with.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }
}

fn build(cert: &std::path::Path, key: &std::path::Path) -> Result<ServerConfig, TlsError> {
    let chain = read_certs(cert)?;
    let lapses = not_after(&chain[0])?;
    let key_der = read_key(key)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        // Refuses a key that is not the certificate's.
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::Key {
            path: key.to_path_buf(),
            message: e.to_string(),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    metrics::gauge!(
        "basalt_tls_certificate_expiry_timestamp_seconds",
        "listener" => "https",
        "cert" => "leaf"
    )
    .set(lapses as f64);
    Ok(config)
}
