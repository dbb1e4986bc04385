//! The jepsen smoke run of `make test`: every workload for a short time (`JEPSEN_SMOKE_SECONDS`,
//! default 40) under the kill and partition nemeses against a real 3-node cluster,
//! list-append under a rolling upgrade, and set under splits (each with a fault while its
//! objects move). Fails on an
//! `invalid` verdict, on replicas a consistency check (`basalt admin check`, once healed) finds
//! differing or cannot compare, or on a run that cannot complete; `unknown` is reported, not
//! failed.
//! Run directories are kept under the target dir's `tmp/jepsen-smoke/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use basalt_jepsen::nemesis::Fault;
use basalt_jepsen::runner::{run, RunConfig};
use basalt_jepsen::workload::Workload;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workload_under_kill_and_partition() {
    let seconds: u64 = std::env::var("JEPSEN_SMOKE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let bin =
        basalt_jepsen::basalt_bin().expect("basalt binary (cargo builds it with the workspace)");
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jepsen-smoke");
    let _ = std::fs::remove_dir_all(&root);
    let mut failures = Vec::new();
    let mut runs = Vec::new();
    for workload in Workload::ALL {
        let cfg = RunConfig {
            workload,
            faults: vec![
                Fault::Kill,
                Fault::PartitionMajority,
                Fault::PartitionLeader,
                Fault::PartitionAsymmetric,
            ],
            nodes: 3,
            shards: 4,
            seconds,
            clients: 6,
            max_ops: 100_000,
            quiet: Duration::from_secs(3),
            active: Duration::from_secs(7),
            check_budget: Duration::from_secs(60),
            out: Default::default(),
            bin: bin.clone(),
            previous: None,
        };
        runs.push(cfg);
    }
    // A rolling upgrade under list-append: the cluster starts on a build standing in for the
    // previous release (this binary without the features it added since, which it leaves out
    // of its member record) and is rolled node by node to this one (`make jepsen-upgrade` runs
    // the real previous release).
    let previous = basalt_jepsen::db::Build {
        bin: bin.clone(),
        env: vec![(
            "BASALT_TESTING_WITHOUT_FEATURES".into(),
            "rebalance,sealed-secrets,slots,slot-batches,slot-index".into(),
        )],
    };
    let mut upgrade = runs[0].clone();
    upgrade.workload = Workload::ListAppend;
    upgrade.faults = vec![Fault::RollingUpgrade];
    upgrade.previous = Some(previous);
    runs.push(upgrade);
    // Splits under the set workload, each with a kill, pause or partition while its objects
    // move: the listing and the counts after healing take every object once.
    let mut split = runs[0].clone();
    split.workload = Workload::Set;
    split.faults = vec![Fault::Split];
    runs.push(split);
    for mut cfg in runs {
        cfg.out = root.join(cfg.name());
        match run(&cfg).await {
            Ok(report) => {
                eprintln!(
                    "{}: {} ({})",
                    cfg.name(),
                    report.verdict.name(),
                    report.summary["ops"]
                );
                let rolled = report.summary["faults"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|i| i["fault"] == "rolling-upgrade"));
                let split = report.summary["faults"].as_array().is_some_and(|f| {
                    f.iter().any(|i| {
                        i["fault"] == "split"
                            && i["detail"]
                                .as_str()
                                .is_some_and(|d| d.contains(" to group "))
                    })
                });
                if cfg.faults.contains(&Fault::Split) && !split {
                    failures.push(format!("{}: no split was begun", cfg.name()));
                }
                if cfg.previous.is_some() && !rolled {
                    failures.push(format!(
                        "{}: no rolling upgrade ran (JEPSEN_SMOKE_SECONDS too short?)",
                        cfg.name()
                    ));
                }
                let consistency = report.summary["consistency"].as_str().unwrap_or_default();
                if !consistency.starts_with("agree") {
                    failures.push(format!("{}: replicas {consistency}", cfg.name()));
                }
                if report.verdict.name() == "invalid" {
                    failures.push(format!(
                        "{}: {}",
                        cfg.name(),
                        serde_json::to_string_pretty(&report.summary["result"]).unwrap_or_default()
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "{}: run failed: {e:#} (see {})",
                cfg.name(),
                cfg.out.display()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "jepsen smoke found problems:\n{}",
        failures.join("\n")
    );
}
