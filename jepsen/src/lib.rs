//! Basalt's Jepsen-style harness: fault injection against real multi-process clusters and
//! checkers for the recorded histories.
//!
//! A run (`runner`) starts `basalt` processes (`db`) whose peer traffic goes through proxies
//! the harness controls (`proxy`), drives them over the public REST API with the `client` crate
//! (`workload`), injects faults on a timeline (`nemesis`), records every invocation and
//! completion (`history`), heals, reads everything back, and judges the history (`checker`):
//! `valid`, `invalid` with the smallest anomaly found, or `unknown`. `plot` draws the run.

pub mod checker;
pub mod db;
pub mod history;
pub mod nemesis;
pub mod plot;
pub mod proxy;
pub mod runner;
pub mod workload;

use std::path::PathBuf;

/// The `basalt` binary next to the running executable (`target/<profile>/basalt`), or
/// `$BASALT_BIN`.
pub fn basalt_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("BASALT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    for dir in exe.ancestors().skip(1).take(3) {
        let candidate = dir.join("basalt");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!(
        "basalt binary not found near {}; build it or set BASALT_BIN",
        exe.display()
    )
}
