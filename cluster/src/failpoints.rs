//! Fail points for the crash tests: places in the write path where a test can make a node die
//! (`fail` crate, compiled in with the `failpoints` feature, which the test build enables;
//! without it the points compile to nothing). They are armed when the node starts, from
//! `BASALT_FAILPOINTS` (`name=actions;...`, the `fail` crate's action syntax, e.g.
//! `log-append=40*off->panic`); while any is armed, a panic aborts the process, as a crash
//! would.
//!
//! The points: `log-append` (a Raft log batch is written, not yet reported durable),
//! `apply-staged` (a batch of committed entries is applied in memory, not yet written),
//! `apply-written` (written, not yet answered), `snapshot-install-batch` (a received
//! snapshot's install cleared the group's state, its table file not yet ingested), `store-write-nospace` (`return`: a
//! store write fails as on a full disk), `snapshot-build-nospace` (`return`: writing a
//! snapshot's file fails as on a full disk); and on the read path
//! `aggregate-read` (a node is about to read its shards for an aggregation: `return` fails
//! that read, `sleep(ms)` delays it); and `apply-skip-create` (`return`: this replica skips an
//! object create the others apply, a state a consistency check must find); and one that holds
//! a task without blocking a thread (`return(ms)`, through [`pause`]): `join-checked` (a
//! member answering `Join` checked the joiner's build, not yet written its record); and in a
//! split's steps (`services::splits`, `panic` to crash the node running it, `return(ms)` to
//! hold it): `split-before-freeze` (the child started, the slots not frozen),
//! `split-copied-page` (a page imported, the cursor not saved), `split-sealed` (the child's
//! imports sealed, the map not switched), `split-dropped-page` (a page of copies dropped, not
//! saved). Neighbours: `raft::log_store`, `statemachine`,
//! `statemachine::snapshot`, `local_read`.

/// The environment variable that arms fail points at start.
pub const FAILPOINTS_ENV: &str = "BASALT_FAILPOINTS";

/// The fail points this build has.
pub const FAIL_POINTS: [&str; 13] = [
    "log-append",
    "store-write-nospace",
    "snapshot-build-nospace",
    "apply-staged",
    "apply-written",
    "snapshot-install-batch",
    "aggregate-read",
    "apply-skip-create",
    "join-checked",
    "split-before-freeze",
    "split-copied-page",
    "split-sealed",
    "split-dropped-page",
];

/// Holds the calling task for the milliseconds the point `name` returns (`return(ms)`) when it
/// is armed; nothing otherwise, or in a build without fail points.
pub async fn pause(name: &str) {
    #[cfg(feature = "failpoints")]
    if let Some(Some(ms)) = fail::eval(name, |arg| arg.and_then(|a| a.parse::<u64>().ok())) {
        tracing::warn!(name, ms, "fail point holds this task");
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Arms the fail points `BASALT_FAILPOINTS` names (nothing when it is unset). An unknown point,
/// malformed actions, or a build without fail points refuse to start rather than run a test
/// that cannot crash.
pub fn arm_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var(FAILPOINTS_ENV) else {
        return Ok(());
    };
    if !cfg!(feature = "failpoints") {
        return Err(format!(
            "{FAILPOINTS_ENV} is set but this build has no fail points (feature `failpoints`)"
        ));
    }
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, actions) = item
            .split_once('=')
            .ok_or_else(|| format!("{FAILPOINTS_ENV}: `{item}` is not name=actions"))?;
        if !FAIL_POINTS.contains(&name) {
            return Err(format!(
                "{FAILPOINTS_ENV}: no fail point `{name}` (known: {})",
                FAIL_POINTS.join(", ")
            ));
        }
        fail::cfg(name, actions).map_err(|e| format!("{FAILPOINTS_ENV}: {name}: {e}"))?;
        tracing::warn!(name, actions, "fail point armed");
    }
    // Any panic while fail points are armed (`panic`, `panic(msg)`, a `return` the point does
    // not support) ends the process, as a crash would, instead of leaving a task dead.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        eprintln!("{msg}: aborting");
        std::process::abort();
    }));
    Ok(())
}
