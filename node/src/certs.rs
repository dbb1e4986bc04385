//! The cluster's certificates from the command line (decisions/0031): `basalt admin certs`
//! makes a CA, node certificates and administrator certificates (`cluster::tls::issue`);
//! `basalt dev` makes them in its data dir on first start; `basalt admin` finds its own. A
//! node's certificates directory holds `ca.pem` (the trusted CAs), `node.pem` and `node.key`;
//! an administrator's `ca.pem`, `admin.pem` and `admin.key`. Callers: `admin`, `dev`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use basalt_cluster::ids::NodeId;
use basalt_cluster::tls::issue::{write_private, Authority, Validity, CA_KEY_CERT, CA_KEY_FILE};
use basalt_cluster::tls::material::{
    ADMIN_CERT_FILE, ADMIN_KEY_FILE, CA_FILE, NODE_CERT_FILE, NODE_KEY_FILE,
};
use basalt_cluster::tls::{CertFiles, PeerIdentity, PeerTls};

/// `basalt admin certs ...`
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CertsCommand {
    /// Make a new CA for the cluster: `<ca-dir>/ca.pem` and `<ca-dir>/ca.key` (keep the key
    /// off the nodes; it signs every certificate of the cluster).
    CreateCa {
        /// Directory of the CA's certificate and key.
        #[arg(long)]
        ca_dir: PathBuf,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 3650)]
        days: u64,
    },
    /// Make node N's certificate, signed by the CA: `<out>/node.pem`, `<out>/node.key`, and
    /// `<out>/ca.pem` when the directory has none (`basalt serve --certs-dir <out>`).
    CreateNode {
        #[arg(long)]
        ca_dir: PathBuf,
        /// The node's id: peers accept the certificate only from node N.
        #[arg(long)]
        node_id: u64,
        /// Addresses the node is reached at (host or host:port, repeatable), also written into
        /// the certificate for tools that verify by address.
        #[arg(long = "addr", value_delimiter = ',')]
        addrs: Vec<String>,
        /// The node's certificates directory.
        #[arg(long)]
        out: PathBuf,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 365)]
        days: u64,
    },
    /// Revoke certificates (a removed node's, a lost admin's): `<ca-dir>/crl.pem` names them;
    /// copy it into every node's certificates directory as `crl.pem` and send the nodes
    /// SIGHUP, after which they refuse those certificates.
    Revoke {
        #[arg(long)]
        ca_dir: PathBuf,
        /// The certificate files to revoke (repeatable).
        #[arg(long = "cert", required = true)]
        certs: Vec<PathBuf>,
    },
    /// Make an administrator's certificate for `basalt admin --certs-dir <out>`:
    /// `<out>/admin.pem`, `<out>/admin.key`, and `<out>/ca.pem` when the directory has none.
    CreateAdmin {
        #[arg(long)]
        ca_dir: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 365)]
        days: u64,
    },
}

fn authority(ca_dir: &Path) -> anyhow::Result<Authority> {
    Ok(Authority::load(
        &ca_dir.join(CA_KEY_CERT),
        &ca_dir.join(CA_KEY_FILE),
    )?)
}

/// Writes `ca.pem` into `out` when it has none (a bundle already there is left for the
/// operator: during a rotation it holds the old and the new CA).
fn place_bundle(ca: &Authority, out: &Path) -> anyhow::Result<()> {
    let bundle = out.join(CA_FILE);
    if bundle.exists() {
        let text = std::fs::read_to_string(&bundle)?;
        if !text.contains(ca.cert_pem().trim()) {
            eprintln!(
                "note: {} does not hold this CA: add it (keeping the old one) before the node reloads",
                bundle.display()
            );
        }
        return Ok(());
    }
    write_private(&bundle, ca.cert_pem().as_bytes(), false)?;
    Ok(())
}

pub fn run(cmd: CertsCommand) -> anyhow::Result<()> {
    match cmd {
        CertsCommand::CreateCa { ca_dir, days } => {
            let ca = Authority::create(Validity::days(days))?;
            let (cert, key) = ca.write(&ca_dir)?;
            println!("CA certificate: {}", cert.display());
            println!(
                "CA key:         {} (keep it safe, off the nodes)",
                key.display()
            );
        }
        CertsCommand::CreateNode {
            ca_dir,
            node_id,
            addrs,
            out,
            days,
        } => {
            let ca = authority(&ca_dir)?;
            let issued = ca.issue_node(NodeId::new(node_id), &addrs, Validity::days(days))?;
            issued.write(&out, NODE_CERT_FILE, NODE_KEY_FILE)?;
            place_bundle(&ca, &out)?;
            println!(
                "node {node_id}: {} (basalt serve --node-id {node_id} --certs-dir {})",
                out.join(NODE_CERT_FILE).display(),
                out.display()
            );
        }
        CertsCommand::Revoke { ca_dir, certs } => {
            let crl = basalt_cluster::tls::issue::revoke(&ca_dir, &certs)?;
            println!(
                "revocation list: {} (copy it into every node's certificates directory as crl.pem, then SIGHUP them)",
                crl.display()
            );
        }
        CertsCommand::CreateAdmin { ca_dir, out, days } => {
            let ca = authority(&ca_dir)?;
            ca.issue_admin(Validity::days(days))?
                .write(&out, ADMIN_CERT_FILE, ADMIN_KEY_FILE)?;
            place_bundle(&ca, &out)?;
            println!(
                "admin: {} (basalt admin --certs-dir {})",
                out.join(ADMIN_CERT_FILE).display(),
                out.display()
            );
        }
    }
    Ok(())
}

/// Where `basalt dev` keeps the CA, and the administrator's certificates, under its data dir.
pub fn dev_ca_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("certs").join("ca")
}
pub fn dev_admin_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("certs").join("admin")
}
/// Node `i`'s certificates directory under `basalt dev`'s data dir.
pub fn dev_node_dir(node_dir: &Path) -> PathBuf {
    node_dir.join("certs")
}

/// Makes what `basalt dev` needs and does not have yet: the CA, node `1..=nodes`'
/// certificates (for 127.0.0.1), an administrator's.
pub fn ensure_dev(
    data_dir: &Path,
    node_dirs: &[(NodeId, PathBuf)],
    rpc: &[String],
) -> anyhow::Result<()> {
    let ca_dir = dev_ca_dir(data_dir);
    let ca = if ca_dir.join(CA_KEY_FILE).exists() {
        authority(&ca_dir)?
    } else {
        let ca = Authority::create(Validity::days(3650))?;
        ca.write(&ca_dir)?;
        ca
    };
    for ((id, dir), addr) in node_dirs.iter().zip(rpc) {
        let certs = dev_node_dir(dir);
        if !certs.join(NODE_CERT_FILE).exists() {
            ca.issue_node(
                *id,
                &[addr.clone(), "localhost".into()],
                Validity::days(3650),
            )?
            .write(&certs, NODE_CERT_FILE, NODE_KEY_FILE)?;
        }
        place_bundle(&ca, &certs)?;
    }
    let admin = dev_admin_dir(data_dir);
    if !admin.join(ADMIN_CERT_FILE).exists() {
        ca.issue_admin(Validity::days(3650))?
            .write(&admin, ADMIN_CERT_FILE, ADMIN_KEY_FILE)?;
    }
    place_bundle(&ca, &admin)?;
    Ok(())
}

/// The administrator's mutual TLS for `basalt admin`: from `--certs-dir`, else from the
/// certificates `make run` / `basalt dev` made in `./data`, else none (plaintext).
pub fn admin_tls(certs_dir: Option<&Path>) -> anyhow::Result<Option<Arc<PeerTls>>> {
    let dir = match certs_dir {
        Some(dir) => dir.to_path_buf(),
        None => {
            let dev = dev_admin_dir(Path::new("./data"));
            if !dev.join(ADMIN_CERT_FILE).exists() {
                return Ok(None);
            }
            eprintln!("basalt admin: using the certificate in {}", dev.display());
            dev
        }
    };
    let tls = PeerTls::load(CertFiles::admin_in(&dir), PeerIdentity::Admin)
        .map_err(|e| anyhow::anyhow!("the admin certificate in {}: {e}", dir.display()))?;
    Ok(Some(Arc::new(tls)))
}

/// A node's peer TLS from its certificates directory.
pub fn node_tls(dir: &Path, node: NodeId) -> anyhow::Result<Arc<PeerTls>> {
    let tls = PeerTls::load(CertFiles::node_in(dir), PeerIdentity::Node(node))
        .map_err(|e| anyhow::anyhow!("peer TLS ({}): {e}", dir.display()))?;
    Ok(Arc::new(tls))
}
