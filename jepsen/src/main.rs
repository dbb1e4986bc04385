//! `basalt-jepsen`: run one test, the smoke set, or the full matrix, and print a table.

use std::path::PathBuf;
use std::time::Duration;

use basalt_jepsen::nemesis::Fault;
use basalt_jepsen::runner::{run, RunConfig};
use basalt_jepsen::workload::Workload;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "basalt-jepsen",
    about = "Fault injection and consistency checking for Basalt"
)]
struct Cli {
    /// Directory for run outputs.
    #[arg(long, default_value = "jepsen-runs")]
    out: PathBuf,
    /// Nodes per cluster (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seconds of client load per run.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// The previous release's `basalt` (`scripts/build-previous.sh`): the rolling-upgrade
    /// nemesis starts the cluster on it and rolls every node to this build.
    #[arg(long)]
    previous_binary: Option<PathBuf>,
    /// Environment of the previous build's processes, `NAME=VALUE` (repeatable).
    #[arg(long, value_parser = parse_env)]
    previous_env: Vec<(String, String)>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One workload under one nemesis (a comma list of faults, `partition`, `all`, or `none`).
    Run {
        #[arg(long)]
        workload: String,
        #[arg(long, default_value = "kill,partition")]
        nemesis: String,
    },
    /// Every workload under the kill and partition nemeses.
    Smoke,
    /// Every workload under every nemesis, one run each.
    Matrix,
    /// Every workload under the rolling-upgrade nemesis (needs `--previous-binary`).
    Upgrade,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?}: NAME=VALUE"))
}

fn config(cli: &Cli, workload: Workload, faults: Vec<Fault>, bin: PathBuf, tag: &str) -> RunConfig {
    let mut cfg = RunConfig {
        workload,
        faults,
        nodes: cli.nodes,
        shards: 4,
        seconds: cli.seconds,
        clients: cli.clients,
        max_ops: 200_000,
        quiet: Duration::from_secs(4),
        active: Duration::from_secs(8),
        check_budget: Duration::from_secs(60),
        out: PathBuf::new(),
        bin,
        previous: cli
            .previous_binary
            .clone()
            .map(|bin| basalt_jepsen::db::Build {
                bin,
                env: cli.previous_env.clone(),
            }),
    };
    cfg.out = cli.out.join(format!("{}-{tag}", cfg.name()));
    cfg
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let bin = basalt_jepsen::basalt_bin()?;
    let stamp = chrono_stamp();
    let plans: Vec<(Workload, Vec<Fault>)> = match &cli.cmd {
        Cmd::Run { workload, nemesis } => {
            vec![(Workload::parse(workload)?, Fault::parse_list(nemesis)?)]
        }
        Cmd::Smoke => Workload::ALL
            .iter()
            .map(|w| (*w, Fault::parse_list("kill,partition").unwrap_or_default()))
            .collect(),
        Cmd::Matrix => Workload::ALL
            .iter()
            .flat_map(|w| Fault::ALL.iter().map(move |f| (*w, vec![*f])))
            .collect(),
        Cmd::Upgrade => Workload::ALL
            .iter()
            .map(|w| (*w, vec![Fault::RollingUpgrade]))
            .collect(),
    };
    println!("| workload | nemesis | ops | ok | fail | info | result | run dir |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut invalid = 0;
    for (w, faults) in plans {
        let cfg = config(&cli, w, faults, bin.clone(), &stamp);
        let nemesis = cfg
            .faults
            .iter()
            .map(Fault::name)
            .collect::<Vec<_>>()
            .join("+");
        match run(&cfg).await {
            Ok(r) => {
                let ops = &r.summary["ops"];
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    w.name(),
                    nemesis,
                    ops["total"],
                    ops["ok"],
                    ops["fail"],
                    ops["info"],
                    r.verdict.name(),
                    r.dir.display()
                );
                if r.verdict.name() == "invalid" {
                    invalid += 1;
                    eprintln!("{}", serde_json::to_string_pretty(&r.summary["result"])?);
                }
            }
            Err(e) => {
                invalid += 1;
                println!(
                    "| {} | {} | - | - | - | - | error: {e} | {} |",
                    w.name(),
                    nemesis,
                    cfg.out.display()
                );
            }
        }
    }
    if invalid > 0 {
        anyhow::bail!("{invalid} run(s) invalid or failed");
    }
    Ok(())
}

fn chrono_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{secs}")
}
