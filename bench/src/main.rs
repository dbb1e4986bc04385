//! `basalt-bench`: drives creates and gets against a running Basalt cluster with C concurrent
//! clients for a bounded time and prints throughput and latency percentiles.
//!
//! `cargo run -p basalt-bench --release -- --url http://127.0.0.1:8080 --credentials
//! data/node1/credentials.json --concurrency 16 --seconds 10`. Several `--url`s spread clients
//! over nodes. Workloads: `create`, `get` (reads objects created in a warm-up), `update`
//! (Increment on a few hot objects), `mixed` (50% get, 50% create), `login` (POST /1/login of 64
//! users registered in the warm-up, in turn: argon2 verification, the attempt count and a
//! session write), `get-session` (as `get`, by a logged-in user who holds roles: the session is
//! checked and the user's roles found on every request).
//!
//! Query workloads (`queries`): `load-queries` fills the class `QueryItem` up to `--objects`
//! objects (resuming a partial load), `declare-indexes` indexes its `k` and `score` columns and
//! prints how long each build took, and `q-eq`, `q-range`, `q-top`, `q-top-unindexed`,
//! `q-newest`, `q-newest-counted`, `q-list`, `q-count`, `q-count-all`, `q-count-unindexed`,
//! `q-groupby`, `q-groupby-all`, `q-groupcount-all` time queries (run them before and after
//! `declare-indexes` for the comparison).
//!
//! File workloads (`files`): `upload-1k`, `upload-1m`, `upload-20m`, `download-1k`,
//! `download-1m`, `download-20m`; their rows add MB/s.
//!
//! Function workloads (`functions`): `fn-trivial`, `fn-query`, `fn-write` call cloud
//! functions deployed in the warm-up (the credentials need the master key).
//!
//! Push workloads (`push`): `load-installations` registers `--objects` installations (resuming
//! a partial load); `push-broadcast` sends one push to all of them through a webhook served by
//! this process and prints its own table (time to accept, first and last message, status).
//!
//! The realtime workload (`realtime`): `--subscribers` WebSocket subscribers spread over the
//! nodes while creates run at `--rate` per second; prints events delivered per second and the
//! latency from a create's acknowledgement to its event's arrival.
//!
//! `--target-rate` paces the clients at that many operations per second together (latency
//! counted from when each request was due); `--stop-file` ends a workload early once the file
//! exists (the rolling-restart benchmark ends its window so).

mod batches;
mod files;
mod functions;
mod push;
mod queries;
mod realtime;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use basalt_client::{AppKeys, Client};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

#[derive(Parser, Debug, Clone)]
#[command(name = "basalt-bench")]
struct Args {
    /// Base URL of a node; repeat to spread clients over nodes.
    #[arg(long = "url", default_value = "http://127.0.0.1:8080")]
    urls: Vec<String>,
    /// credentials.json written by `basalt serve --init`.
    #[arg(long)]
    credentials: std::path::PathBuf,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds per workload.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Workloads to run, in order.
    #[arg(long = "workload", default_values_t = vec!["create".to_string(), "get".to_string()])]
    workloads: Vec<String>,
    /// Size of the payload string field of created objects, in bytes.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Label printed in the table (e.g. "1 node").
    #[arg(long, default_value = "")]
    label: String,
    /// Objects of the query workloads' class.
    #[arg(long, default_value_t = 1_000_000)]
    objects: u64,
    /// Subscribers of the realtime workload.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Creates per second of the realtime workload.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// Operations per second of all clients together (0: as fast as they can). Each client
    /// keeps its own schedule, and a request's latency counts from when it was due, so a
    /// stall shows in the percentiles instead of slowing the load (as wrk2 does).
    #[arg(long, default_value_t = 0)]
    target_rate: u64,
    /// The workload also ends (before `--seconds`) once this file exists.
    #[arg(long)]
    stop_file: Option<std::path::PathBuf>,
    /// Appends one line per `--timeline-step-ms` of each timed workload to this file: the
    /// step's start (Unix time, seconds), requests, failed, p50 ms, p99 ms, max ms (a request
    /// counts in the step it was due or sent).
    #[arg(long)]
    timeline: Option<std::path::PathBuf>,
    /// Length of a `--timeline` step, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeline_step_ms: u64,
}

struct Outcome {
    ops: u64,
    errors: u64,
    /// Failed operations by what went wrong (create, get and mixed workloads).
    failures: BTreeMap<String, u64>,
    /// (millisecond of the run, latency µs, succeeded) of every request, with `--timeline`.
    samples: Vec<(u64, u64, bool)>,
    /// When the workload started, in Unix milliseconds (`samples` count from it).
    started_unix_ms: u64,
    /// File bytes moved (file workloads).
    bytes: u64,
    hist: Histogram<u64>,
    elapsed: Duration,
}

/// Password of the warm-up users of the `login` workload.
const BENCH_PASSWORD: &str = "bench-password";

/// Users the `login` workload logs in, in turn: many people logging in, not one account from
/// every connection at once (the server throttles attempts in flight per account).
const LOGIN_USERS: usize = 64;

/// Whether `result` succeeded; a failure is counted under its error's text (numbers in it,
/// such as ids and addresses, are kept: the kinds are few).
fn tally<T>(result: Result<T, basalt_client::Error>, failures: &mut BTreeMap<String, u64>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => {
            let mut text = e.to_string();
            text.truncate(160);
            *failures.entry(text).or_default() += 1;
            false
        }
    }
}

/// Whether a read found its object; a missing one is a failure too.
fn found<T>(
    result: Result<Option<T>, basalt_client::Error>,
    failures: &mut BTreeMap<String, u64>,
) -> bool {
    match result {
        Ok(Some(_)) => true,
        Ok(None) => {
            *failures.entry("object not found".to_string()).or_default() += 1;
            false
        }
        Err(e) => tally(Err::<(), _>(e), failures),
    }
}

async fn run_workload(
    args: &Args,
    clients: &[Client],
    workload: &str,
    ids: Arc<Vec<String>>,
    user: &str,
    file_set: Arc<files::FileSet>,
) -> anyhow::Result<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let payload = "x".repeat(args.payload);
    let started = Instant::now();
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut tasks = Vec::new();
    for c in 0..args.concurrency {
        let client = clients[c % clients.len()].clone();
        let (stop, ids, payload, workload, user, file_set) = (
            stop.clone(),
            ids.clone(),
            payload.clone(),
            workload.to_string(),
            user.to_string(),
            file_set.clone(),
        );
        let objects = args.objects;
        let keep_samples = args.timeline.is_some();
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        // With a target rate, this client's requests are due every `every`, the clients'
        // schedules staggered over one interval.
        let every = (args.target_rate > 0)
            .then(|| Duration::from_secs_f64(args.concurrency as f64 / args.target_rate as f64));
        let mut due =
            started + every.map_or(Duration::ZERO, |e| e * c as u32 / args.concurrency as u32);
        tasks.push(tokio::spawn(async move {
            let (mut ops, mut errors, mut bytes, mut i) = (0u64, 0u64, 0u64, c);
            let mut failures = BTreeMap::new();
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let t = match every {
                    Some(every) => {
                        tokio::time::sleep_until(due.into()).await;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let t = due;
                        due += every;
                        t
                    }
                    None => Instant::now(),
                };
                let query = queries::params(&workload, i as u64, objects);
                let ok = match workload.as_str() {
                    w if files::file_workload(w).is_some() => {
                        match file_set.run(&client, w, i).await {
                            Ok(moved) => {
                                bytes += moved;
                                true
                            }
                            Err(_) => false,
                        }
                    }
                    w if functions::function_of(w).is_some() => {
                        let f = functions::function_of(w).unwrap_or_default();
                        functions::call(&client, f, i as u64).await
                    }
                    _ if query.is_some() => {
                        let params: Vec<(&str, &str)> = query
                            .iter()
                            .flatten()
                            .map(|(k, v)| (*k, v.as_str()))
                            .collect();
                        client.query(queries::CLASS, &params).await.is_ok()
                    }
                    "create" => tally(
                        client
                            .create_object("BenchItem", &json!({"n": i % 1000, "payload": payload}))
                            .await,
                        &mut failures,
                    ),
                    "get" | "get-session" => found(
                        client.get_object("BenchItem", &ids[i % ids.len()]).await,
                        &mut failures,
                    ),
                    "update" => client
                        .increment("BenchItem", &ids[i % ids.len().min(8)], "n", 1)
                        .await
                        .is_ok(),
                    "login" => client
                        .request(
                            basalt_client::Method::POST,
                            "/1/login",
                            Some(&json!({
                                "username": format!("{user}-{}", i % LOGIN_USERS),
                                "password": BENCH_PASSWORD
                            })),
                            false,
                        )
                        .await
                        .is_ok(),
                    _ => {
                        if i % 2 == 0 {
                            found(
                                client.get_object("BenchItem", &ids[i % ids.len()]).await,
                                &mut failures,
                            )
                        } else {
                            tally(
                                client
                                    .create_object(
                                        "BenchItem",
                                        &json!({"n": 1, "payload": payload}),
                                    )
                                    .await,
                                &mut failures,
                            )
                        }
                    }
                };
                let us = t.elapsed().as_micros().max(1) as u64;
                if keep_samples {
                    samples.push((t.duration_since(started).as_millis() as u64, us, ok));
                }
                let _ = hist.record(us.min(60_000_000));
                ops += 1;
                if !ok {
                    errors += 1;
                }
            }
            (ops, errors, bytes, hist, failures, samples)
        }));
    }
    let end = started + Duration::from_secs(args.seconds);
    while Instant::now() < end && !args.stop_file.as_ref().is_some_and(|f| f.exists()) {
        tokio::time::sleep(
            Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())),
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut out = Outcome {
        ops: 0,
        errors: 0,
        failures: BTreeMap::new(),
        samples: Vec::new(),
        started_unix_ms,
        bytes: 0,
        hist: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        elapsed: Duration::ZERO,
    };
    for t in tasks {
        let (ops, errors, bytes, hist, failures, samples) = t.await?;
        out.samples.extend(samples);
        for (what, n) in failures {
            *out.failures.entry(what).or_default() += n;
        }
        out.ops += ops;
        out.errors += errors;
        out.bytes += bytes;
        out.hist.add(&hist)?;
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

/// Roles of the `get-session` workload's app: the user holds two of them, one through a child.
const SESSION_ROLES: usize = 8;

/// Clients like `clients` acting as one registered user who holds roles.
async fn logged_in(clients: &[Client], user: &str) -> anyhow::Result<Vec<Client>> {
    let c = &clients[0];
    let reader = format!("{user}-reader");
    let r = c
        .request(
            basalt_client::Method::POST,
            "/1/users",
            Some(&json!({"username": reader, "password": BENCH_PASSWORD})),
            false,
        )
        .await
        .context("registering the session workload's user")?;
    let (user_id, token) = (
        r.body["objectId"].as_str().unwrap_or_default().to_string(),
        r.body["sessionToken"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    let mut child = None;
    for n in 0..SESSION_ROLES {
        let mut body = json!({"name": format!("{user}-role-{n}"), "ACL": {"*": {"read": true}}});
        if n == 0 {
            body["users"] = json!({"__op": "AddRelation", "objects": [
                {"__type": "Pointer", "className": "_User", "objectId": user_id}]});
        }
        if n == 1 {
            if let Some(id) = &child {
                body["roles"] = json!({"__op": "AddRelation", "objects": [
                    {"__type": "Pointer", "className": "_Role", "objectId": id}]});
            }
        }
        let made = c
            .request(basalt_client::Method::POST, "/1/roles", Some(&body), false)
            .await
            .context("creating the session workload's roles")?;
        if n == 0 {
            child = made.body["objectId"].as_str().map(str::to_string);
        }
    }
    Ok(clients
        .iter()
        .map(|c| c.clone().with_session(Some(&token)))
        .collect())
}

/// Appends `workload`'s lines, one per `step_ms`, to `path`.
fn write_timeline(
    path: &std::path::Path,
    workload: &str,
    started_unix_ms: u64,
    step_ms: u64,
    samples: &[(u64, u64, bool)],
) -> anyhow::Result<()> {
    use std::io::Write;
    let step_ms = step_ms.max(1);
    let mut steps: BTreeMap<u64, (Histogram<u64>, u64)> = BTreeMap::new();
    for &(at_ms, us, ok) in samples {
        let step = (started_unix_ms + at_ms) / step_ms;
        let (hist, failed) = match steps.entry(step) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert((Histogram::new_with_bounds(1, 60_000_000, 3)?, 0))
            }
        };
        hist.record(us.min(60_000_000))?;
        *failed += u64::from(!ok);
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(
        f,
        "# {workload}: step_start requests failed p50_ms p99_ms max_ms"
    )?;
    for (step, (hist, failed)) in steps {
        writeln!(
            f,
            "{:.3} {} {failed} {} {} {}",
            (step * step_ms) as f64 / 1000.0,
            hist.len(),
            ms(hist.value_at_quantile(0.5)),
            ms(hist.value_at_quantile(0.99)),
            ms(hist.max())
        )?;
    }
    Ok(())
}

/// Operations per second, with decimals when there are few.
fn rate(r: f64) -> String {
    if r < 10.0 {
        format!("{r:.2}")
    } else {
        format!("{r:.0}")
    }
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(&args.credentials).context("reading credentials")?,
    )?;
    let keys: AppKeys =
        serde_json::from_value(doc["app"].clone()).context("credentials.json has no app keys")?;
    let clients: Vec<Client> = args
        .urls
        .iter()
        .map(|u| Client::new(u, Some(keys.clone()))?.with_timeout(Duration::from_secs(120)))
        .collect::<Result<_, _>>()?;

    // Warm-up: objects for the read and update workloads (bounded count).
    let mut ids = Vec::new();
    for i in 0..200 {
        let c = &clients[i % clients.len()];
        ids.push(
            c.create_object("BenchItem", &json!({"n": 0, "payload": "warm"}))
                .await?
                .object_id,
        );
    }
    let ids = Arc::new(ids);
    let user = format!("bench-{}", std::process::id());
    if args.workloads.iter().any(|w| w == "login") {
        for n in 0..LOGIN_USERS {
            clients[n % clients.len()]
                .request(
                    basalt_client::Method::POST,
                    "/1/users",
                    Some(&json!({"username": format!("{user}-{n}"), "password": BENCH_PASSWORD})),
                    false,
                )
                .await
                .context("registering the login workload's users")?;
        }
    }

    let session_clients = if args.workloads.iter().any(|w| w == "get-session") {
        logged_in(&clients, &user).await?
    } else {
        Vec::new()
    };

    let file_set = Arc::new(files::FileSet::prepare(&clients, &args.workloads).await?);
    functions::prepare(&clients, &args.workloads).await?;

    println!("| cluster | workload | clients | seconds | ops | errors | ops/s | MB/s | p50 ms | p99 ms | p99.9 ms | max ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for w in &args.workloads {
        match w.as_str() {
            "load-queries" => {
                let have = queries::count(&clients[0]).await?;
                let failed = queries::load(&clients, have, args.objects, args.concurrency).await?;
                let now = queries::count(&clients[0]).await?;
                eprintln!(
                    "{} holds {now} objects ({failed} creates failed)",
                    queries::CLASS
                );
                continue;
            }
            "load-installations" => {
                let have = push::count(&clients[0]).await?;
                let failed = push::load(&clients, have, args.objects, args.concurrency).await?;
                let now = push::count(&clients[0]).await?;
                eprintln!("{now} installations ({failed} registrations failed)");
                continue;
            }
            "push-broadcast" => {
                let console = clients[0].clone().with_console(
                    doc["console"]["email"].as_str().unwrap_or_default(),
                    doc["console"]["password"].as_str().unwrap_or_default(),
                );
                let n = push::count(&clients[0]).await?;
                let b = push::broadcast(&clients[0], &console, &keys.application_id, n).await?;
                let secs = |d: Duration| format!("{:.2}", d.as_secs_f64());
                let spread = (b.last - b.first).as_secs_f64().max(0.001);
                println!();
                println!("| cluster | installations | accepted in ms | first message s | last message s | status succeeded s | messages/s (first to last) | installations/s (send to last) | batches | messages received |");
                println!("|---|---|---|---|---|---|---|---|---|---|");
                println!(
                    "| {} | {} | {:.1} | {} | {} | {} | {:.0} | {:.0} | {} | {} |",
                    args.label,
                    b.installations,
                    b.accepted.as_secs_f64() * 1000.0,
                    secs(b.first),
                    secs(b.last),
                    secs(b.finished),
                    b.messages as f64 / spread,
                    b.installations as f64 / b.last.as_secs_f64().max(0.001),
                    b.batches,
                    b.messages,
                );
                continue;
            }
            "realtime" => {
                let o = realtime::run(
                    &args.urls,
                    &keys,
                    &clients,
                    args.subscribers,
                    args.rate,
                    args.seconds,
                )
                .await?;
                let expected = o.creates * o.subscribers as u64;
                println!();
                println!("| cluster | subscribers | creates | creates/s | events delivered | events expected | events/s | resyncs | p50 ms | p99 ms | p99.9 ms | max ms |");
                println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
                println!(
                    "| {} | {} | {} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
                    args.label,
                    o.subscribers,
                    o.creates,
                    o.creates as f64 / o.seconds,
                    o.delivered,
                    expected,
                    o.delivered as f64 / o.seconds,
                    o.resyncs,
                    ms(o.hist.value_at_quantile(0.5)),
                    ms(o.hist.value_at_quantile(0.99)),
                    ms(o.hist.value_at_quantile(0.999)),
                    ms(o.hist.max()),
                );
                if o.create_errors > 0 {
                    eprintln!("{} creates failed", o.create_errors);
                }
                continue;
            }
            "declare-indexes" => {
                for (field, took, indexed) in queries::declare_indexes(&clients[0]).await? {
                    eprintln!(
                        "index on {field}: {indexed} objects in {:.1} s",
                        took.as_secs_f64()
                    );
                }
                continue;
            }
            _ => {}
        }
        let by = if w == "get-session" {
            &session_clients
        } else {
            &clients
        };
        let o = run_workload(&args, by, w, ids.clone(), &user, file_set.clone()).await?;
        let secs = o.elapsed.as_secs_f64();
        let mb_per_s = if files::file_workload(w).is_some() {
            format!("{:.1}", o.bytes as f64 / (1u64 << 20) as f64 / secs)
        } else {
            "—".to_string()
        };
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
            args.label,
            w,
            args.concurrency,
            secs,
            o.ops,
            o.errors,
            rate(o.ops as f64 / secs),
            mb_per_s,
            ms(o.hist.value_at_quantile(0.5)),
            ms(o.hist.value_at_quantile(0.99)),
            ms(o.hist.value_at_quantile(0.999)),
            ms(o.hist.max()),
        );
        for (what, n) in &o.failures {
            eprintln!("{w}: {n} failed: {what}");
        }
        if let Some(path) = &args.timeline {
            write_timeline(
                path,
                w,
                o.started_unix_ms,
                args.timeline_step_ms,
                &o.samples,
            )?;
        }
    }
    Ok(())
}
