//! Loopback ports for programs that start local Basalt nodes next to their clients (the
//! integration tests, the jepsen harness): `free_port` picks one nothing listens on.

use std::sync::atomic::{AtomicU32, Ordering};

/// The first port `free_port` picks from, and how many it walks.
const FIRST: u32 = 20_000;
const PORTS: u32 = 12_000;

/// A loopback port nothing listens on now, for a node or proxy to bind later. Taken below
/// Linux's ephemeral range (32768–60999), where the kernel picks the source ports of the
/// program's own connections: one of them could take the port before the node binds it
/// ("Address already in use" at start). Each process walks the range from its own offset, so
/// one process never picks a port twice. An error when every port of the range is taken.
pub fn free_port() -> std::io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..PORTS {
        let port = FIRST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % PORTS;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free port in {FIRST}..{}", FIRST + PORTS),
    ))
}
