//! Network partitions made real: every node's peer (gRPC) traffic enters through a TCP proxy
//! owned by the harness. Nodes dial each other at the proxy address (`--rpc-advertise`) and
//! make their outgoing connections from `127.0.1.<n>` (`--rpc-source-ip`), so the proxy in front
//! of node `to` knows which node `from` each connection comes from. Cutting the directed link
//! `from → to` refuses new connections and drops open ones; a node's requests to a peer travel on
//! its own outgoing connections, so cutting one direction models an asymmetric partition.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The source IP node `index` (0-based) makes its peer connections from.
pub fn source_ip(index: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, (index + 1) as u8))
}

fn node_of(ip: IpAddr) -> Option<usize> {
    match ip {
        IpAddr::V4(v4) if v4.octets()[..3] == [127, 0, 1] && v4.octets()[3] > 0 => {
            Some(v4.octets()[3] as usize - 1)
        }
        _ => None,
    }
}

type Conns = Arc<Mutex<Vec<(usize, usize, JoinHandle<()>)>>>;

/// The directed links currently cut, shared by every node's proxy.
#[derive(Clone, Default)]
pub struct Net {
    blocked: Arc<Mutex<HashSet<(usize, usize)>>>,
    conns: Conns,
    proxies: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Net {
    /// Starts the proxy in front of node `to`: listens on `listen`, forwards to `target`.
    pub async fn start_proxy(
        &self,
        to: usize,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> std::io::Result<()> {
        let listener = TcpListener::bind(listen).await?;
        let (blocked, conns) = (self.blocked.clone(), self.conns.clone());
        let task = tokio::spawn(async move {
            while let Ok((inbound, peer)) = listener.accept().await {
                let from = node_of(peer.ip());
                let cut = from.is_some_and(|f| {
                    blocked
                        .lock()
                        .map(|b| b.contains(&(f, to)))
                        .unwrap_or(false)
                });
                if cut {
                    drop(inbound);
                    continue;
                }
                let handle = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let mut inbound = inbound;
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let (Some(f), Ok(mut c)) = (from, conns.lock()) {
                    c.retain(|(_, _, h)| !h.is_finished());
                    c.push((f, to, handle));
                }
            }
        });
        if let Ok(mut p) = self.proxies.lock() {
            p.push(task);
        }
        Ok(())
    }

    /// Cuts exactly the given directed links (healing all others).
    pub fn set_cut(&self, links: impl IntoIterator<Item = (usize, usize)>) {
        let links: HashSet<(usize, usize)> = links.into_iter().collect();
        if let Ok(mut c) = self.conns.lock() {
            c.retain(|(f, t, h)| {
                if links.contains(&(*f, *t)) {
                    h.abort();
                    false
                } else {
                    true
                }
            });
        }
        if let Ok(mut b) = self.blocked.lock() {
            *b = links;
        }
    }

    pub fn heal(&self) {
        self.set_cut([]);
    }

    /// Cuts every link between the two sides, both ways.
    pub fn partition(&self, a: &[usize], b: &[usize]) {
        let mut links = Vec::new();
        for &x in a {
            for &y in b {
                links.push((x, y));
                links.push((y, x));
            }
        }
        self.set_cut(links);
    }

    pub fn shutdown(&self) {
        self.heal();
        if let Ok(mut p) = self.proxies.lock() {
            for t in p.drain(..) {
                t.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_map_back_to_nodes() {
        for i in 0..5 {
            assert_eq!(node_of(source_ip(i)), Some(i));
        }
        assert_eq!(node_of("127.0.0.1".parse().unwrap()), None);
    }

    #[tokio::test]
    async fn a_cut_link_refuses_only_its_direction() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4];
                    if s.read_exact(&mut buf).await.is_ok() {
                        let _ = s.write_all(&buf).await;
                    }
                });
            }
        });
        let net = Net::default();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        net.start_proxy(1, listen, target).await.unwrap();
        async fn roundtrip(from: usize, to: SocketAddr) -> bool {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(SocketAddr::new(source_ip(from), 0)).unwrap();
            let Ok(mut s) = sock.connect(to).await else {
                return false;
            };
            if s.write_all(b"ping").await.is_err() {
                return false;
            }
            let mut buf = [0u8; 4];
            matches!(
                tokio::time::timeout(std::time::Duration::from_secs(2), s.read_exact(&mut buf))
                    .await,
                Ok(Ok(_))
            ) && &buf == b"ping"
        }
        assert!(roundtrip(0, listen).await);
        net.set_cut([(0, 1)]);
        assert!(!roundtrip(0, listen).await, "0 → 1 is cut");
        assert!(roundtrip(2, listen).await, "2 → 1 is not");
        net.heal();
        assert!(roundtrip(0, listen).await);
        net.shutdown();
    }
}
