//! Who a certificate of the cluster's CA names (decisions/0031). A node's certificate carries
//! the DNS names `node-<id>.basalt.internal` (which node) and `node.basalt.internal` (some node:
//! what a client that does not know the node id verifies), an admin's `admin.basalt.internal`.
//! The peer services read the caller's identity from its certificate here, never from what a
//! message says; the client side verifies the server's name with rustls.

use std::fmt;

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::ids::NodeId;

/// The suffix of every name the cluster's certificates carry.
pub const NAME_SUFFIX: &str = ".basalt.internal";
/// The name every node certificate carries: a client that does not know which node it reaches
/// (`basalt admin`, a joining node asking its seed) verifies this one.
pub const ANY_NODE_NAME: &str = "node.basalt.internal";
/// The name an administrator's certificate carries.
pub const ADMIN_NAME: &str = "admin.basalt.internal";

/// The name node `id`'s certificate carries, which a peer dialing it verifies.
pub fn node_name(id: NodeId) -> String {
    format!("node-{id}{NAME_SUFFIX}")
}

/// Who the other end of a peer connection proved to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerIdentity {
    /// A member (or would-be member) of the cluster.
    Node(NodeId),
    /// An operator's tool (`basalt admin`): may call admin requests only.
    Admin,
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerIdentity::Node(id) => write!(f, "node {id}"),
            PeerIdentity::Admin => f.write_str("admin"),
        }
    }
}

/// Why a certificate names no usable identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the certificate cannot be parsed: {0}")]
    Unparsable(String),
    #[error("the certificate names no node or admin identity (no {NAME_SUFFIX} name)")]
    None,
    #[error("the certificate names more than one identity: {0}")]
    Ambiguous(String),
}

/// The DNS names of a certificate's subjectAltName.
pub fn dns_names(der: &[u8]) -> Result<Vec<String>, IdentityError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| IdentityError::Unparsable(e.to_string()))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| IdentityError::Unparsable(e.to_string()))?;
    Ok(san
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The identity a (verified) end-entity certificate names: exactly one of `node-<id>` or
/// `admin` under [`NAME_SUFFIX`] (`node.basalt.internal` only says "a node").
pub fn identity_of(der: &[u8]) -> Result<PeerIdentity, IdentityError> {
    let mut found: Vec<PeerIdentity> = Vec::new();
    for name in dns_names(der)? {
        let Some(label) = name.strip_suffix(NAME_SUFFIX) else {
            continue;
        };
        let identity = if label == "admin" {
            PeerIdentity::Admin
        } else if let Some(id) = label
            .strip_prefix("node-")
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n > 0)
        {
            PeerIdentity::Node(NodeId::new(id))
        } else {
            continue;
        };
        if !found.contains(&identity) {
            found.push(identity);
        }
    }
    match found.as_slice() {
        [] => Err(IdentityError::None),
        [one] => Ok(*one),
        many => Err(IdentityError::Ambiguous(
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::issue::{Authority, Validity};

    #[test]
    fn a_node_certificate_names_its_node_and_an_admin_one_the_admin() {
        let ca = Authority::create(Validity::days(30)).expect("ca");
        let node = ca
            .issue_node(
                NodeId::new(7),
                &["127.0.0.1:9080".into()],
                Validity::days(1),
            )
            .expect("node");
        let admin = ca.issue_admin(Validity::days(1)).expect("admin");
        assert_eq!(
            identity_of(node.cert_der()).expect("node identity"),
            PeerIdentity::Node(NodeId::new(7))
        );
        let names = dns_names(node.cert_der()).expect("names");
        assert!(names.contains(&ANY_NODE_NAME.to_string()), "{names:?}");
        assert_eq!(
            identity_of(admin.cert_der()).expect("admin identity"),
            PeerIdentity::Admin
        );
    }

    #[test]
    fn garbage_names_no_identity() {
        assert!(matches!(
            identity_of(b"not a certificate"),
            Err(IdentityError::Unparsable(_))
        ));
    }
}
