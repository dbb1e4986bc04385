//! The `basalt` command line: `serve` one node, `dev` a local cluster, `admin` a running
//! cluster. Options also come from the environment (`BASALT_<NAME>`) and a config file
//! (`--config`, applied by `config` before parsing). Caller: `main`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "basalt",
    version,
    about = "Basalt: a distributed backend-as-a-service"
)]
pub struct Cli {
    /// A TOML file of options (`http-header-timeout-secs = 20`); the command line and the
    /// environment take precedence over it.
    #[arg(long, global = true, env = "BASALT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run one node of a cluster.
    Serve(Box<crate::serve::ServeArgs>),
    /// Start a local cluster of N node processes and wait for Ctrl-C.
    Dev(Box<crate::dev::DevArgs>),
    /// Administer a running cluster through one node's gRPC address.
    Admin {
        /// gRPC address of any node.
        #[arg(long, default_value = "127.0.0.1:9080", env = "BASALT_RPC")]
        rpc: String,
        /// Directory of the administrator's certificate (`ca.pem`, `admin.pem`, `admin.key`;
        /// `basalt admin certs create-admin`); default: `./data/certs/admin` when `make run`
        /// made it, else none (only a node without peer TLS answers).
        #[arg(long, env = "BASALT_CERTS_DIR")]
        certs_dir: Option<PathBuf>,
        #[command(subcommand)]
        command: crate::admin::AdminCommand,
    },
}

/// Every option of `serve` and `dev` that a config file may set: (long name, environment
/// variable).
pub fn settable_options() -> Vec<(String, String)> {
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut out: Vec<(String, String)> = Vec::new();
    for sub in cmd
        .get_subcommands()
        .filter(|s| matches!(s.get_name(), "serve" | "dev"))
    {
        for arg in sub.get_arguments() {
            let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else {
                continue;
            };
            let entry = (long.to_string(), env.to_string_lossy().into_owned());
            if long != "config" && !out.contains(&entry) {
                out.push(entry);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_has_its_environment_variable() {
        let cmd = <Cli as clap::CommandFactory>::command();
        cmd.clone().debug_assert();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if long == "help" || long == "version" {
                    continue;
                }
                let want = format!("BASALT_{}", long.to_uppercase().replace('-', "_"));
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                assert_eq!(
                    env.as_deref(),
                    Some(want.as_str()),
                    "{} --{long}",
                    sub.get_name()
                );
            }
        }
    }

    #[test]
    fn the_configuration_reference_lists_every_option() {
        let doc = include_str!("../../docs/configuration.md");
        for (long, env) in settable_options() {
            assert!(doc.contains(&format!("`--{long}`")), "--{long} missing");
            assert!(doc.contains(&format!("`{env}`")), "{env} missing");
        }
        assert!(doc.contains("`--config`") && doc.contains("`BASALT_CONFIG`"));
    }
}
