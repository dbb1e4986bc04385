//! Who may call what on the peer port (decisions/0031). With peer TLS every connection carries
//! a certificate the cluster's CA signed (the handshake refused the others); this module reads
//! the identity it names (`tls::identity`) for each request: Raft traffic, forwarded proposals
//! and reads, change streams and file copies need a node's certificate, and a Raft message must
//! come from the node it names as its sender; admin requests need an admin's certificate,
//! except the few nodes send one another (`AdminRequest::node_may_send`; the shared secret is
//! for nodes only). Without peer TLS
//! (plaintext, loopback or `--insecure`) every caller is taken at its word, as the docs warn.

use tonic::{Request, Status};

use crate::admin::AdminRequest;
use crate::ids::NodeId;
use crate::raft::Vote;
use crate::tls::identity::PeerIdentity;

/// Whether the peer port checks callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAuth {
    /// Plaintext: no caller proves anything.
    Open,
    /// Mutual TLS: every caller proved an identity of the cluster's CA.
    Mutual,
}

/// Who called, as far as this node can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The peer port runs without TLS: nothing is known.
    Unverified,
    Proved(PeerIdentity),
}

fn refused(what: &str, caller: Caller) -> Status {
    metrics::counter!("basalt_peer_requests_refused_total").increment(1);
    let who = match caller {
        Caller::Unverified => "an unverified caller".to_string(),
        Caller::Proved(id) => id.to_string(),
    };
    tracing::warn!(%who, "peer request refused: {what}");
    Status::permission_denied(format!("{who} may not {what}"))
}

impl PeerAuth {
    /// The caller of `req`: the identity its connection's certificate named at the handshake
    /// (`accept::PeerConn`).
    pub fn caller<T>(self, req: &Request<T>) -> Result<Caller, Status> {
        if self == PeerAuth::Open {
            return Ok(Caller::Unverified);
        }
        req.extensions()
            .get::<super::accept::PeerInfo>()
            .map(|info| Caller::Proved(info.identity))
            .ok_or_else(|| Status::unauthenticated("a client certificate is required"))
    }

    /// A node's request (forwarded work, copies, changes): its node id, or `None` unverified.
    pub fn node<T>(self, req: &Request<T>, what: &str) -> Result<Option<NodeId>, Status> {
        match self.caller(req)? {
            Caller::Unverified => Ok(None),
            Caller::Proved(PeerIdentity::Node(id)) => Ok(Some(id)),
            other => Err(refused(what, other)),
        }
    }

    /// An admin request: allowed to admins, and to nodes for the requests nodes send.
    pub fn admin<T>(self, req: &Request<T>, admin: &AdminRequest) -> Result<(), Status> {
        match self.caller(req)? {
            Caller::Unverified => Ok(()),
            Caller::Proved(PeerIdentity::Admin) if admin.admin_may_send() => Ok(()),
            Caller::Proved(PeerIdentity::Node(id)) if admin.node_may_send(id) => Ok(()),
            other => Err(refused(&format!("send {}", admin.name()), other)),
        }
    }
}

/// A Raft message must come from the node its vote names (the leader that appends, the
/// candidate that asks for votes, the leader that sends a snapshot or hands leadership over).
pub fn check_sender(sender: Option<NodeId>, vote: &Vote) -> Result<(), crate::error::Error> {
    let claimed = vote.leader_id().node_id;
    match sender {
        Some(node) if claimed != node => {
            metrics::counter!("basalt_peer_requests_refused_total").increment(1);
            tracing::warn!(%node, %claimed, "Raft message under another node's name refused");
            Err(crate::error::Error::InvalidOperation(format!(
                "node {node} sent a Raft message as node {claimed}"
            )))
        }
        _ => Ok(()),
    }
}
