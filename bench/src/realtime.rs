//! The realtime workload (`realtime`): `--subscribers` WebSocket clients spread over the nodes
//! subscribe to every create of the class `RtBench` (`/1/realtime`), then creates run at
//! `--rate` per second for `--seconds`. It measures the events delivered per second to all
//! subscribers and the end-to-end latency of each: from the create's acknowledgement to the
//! event's arrival (an event that beats its acknowledgement counts 0). Every create carries its
//! number `n`, by which a subscriber finds the create's acknowledgement time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use basalt_client::{AppKeys, Client};
use futures::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const CLASS: &str = "RtBench";

/// What a run measured.
pub struct Outcome {
    pub subscribers: usize,
    pub creates: u64,
    pub create_errors: u64,
    pub seconds: f64,
    pub delivered: u64,
    pub resyncs: u64,
    /// Latency from acknowledgement to arrival, in microseconds.
    pub hist: Histogram<u64>,
}

/// One subscriber: connects to `base` (http://host:port), subscribes, then counts events and
/// their latencies until `stop` says so.
async fn subscriber(
    base: String,
    keys: AppKeys,
    acks: Arc<Vec<AtomicU64>>,
    epoch: Instant,
    ready: tokio::sync::mpsc::Sender<()>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(u64, u64, Histogram<u64>)> {
    let url = format!(
        "{}/1/realtime?applicationId={}&restKey={}",
        base.replacen("http://", "ws://", 1),
        keys.application_id,
        keys.rest_key
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .context("connecting a subscriber")?;
    let sub = json!({"name": "client_sub", "args": [{"appKey": keys.application_id,
        "tableName": CLASS, "action": "updateTable"}]});
    ws.send(Message::Text(sub.to_string().into())).await?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let (mut delivered, mut resyncs, mut acked) = (0u64, 0u64, false);
    loop {
        let m = tokio::select! {
            m = ws.next() => m,
            _ = stop.changed() => break,
        };
        let Some(Ok(Message::Text(text))) = m else {
            match m {
                Some(Ok(_)) => continue,
                _ => break,
            }
        };
        let now = epoch.elapsed().as_micros() as u64;
        let text = text.as_str();
        if text.starts_with(r#"{"name":"server_sub""#) && !acked {
            acked = true;
            let _ = ready.send(()).await;
            continue;
        }
        if text.starts_with(r#"{"name":"server_resync""#) {
            resyncs += 1;
            continue;
        }
        if !text.starts_with(r#"{"name":"server_pub""#) {
            continue;
        }
        delivered += 1;
        // The create's number, without parsing the whole event.
        let n = text.find(r#""bench_n":"#).and_then(|at| {
            let rest = &text[at + 10..];
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse::<usize>().ok()
        });
        if let Some(ack) = n
            .and_then(|n| acks.get(n))
            .map(|a| a.load(Ordering::Relaxed))
        {
            let latency = if ack == 0 { 0 } else { now.saturating_sub(ack) };
            hist.record(latency.max(1))?;
        }
    }
    Ok((delivered, resyncs, hist))
}

/// Runs the workload: `subscribers` over `bases`, creates at `rate` per second for `seconds`
/// through `clients`.
pub async fn run(
    bases: &[String],
    keys: &AppKeys,
    clients: &[Client],
    subscribers: usize,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Outcome> {
    let planned = (rate * seconds) as usize + 1;
    let acks: Arc<Vec<AtomicU64>> = Arc::new((0..planned).map(|_| AtomicU64::new(0)).collect());
    let epoch = Instant::now();
    let (ready_tx, mut ready) = tokio::sync::mpsc::channel(subscribers.max(1));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut subs = Vec::new();
    for i in 0..subscribers {
        let base = bases[i % bases.len()].clone();
        subs.push(tokio::spawn(subscriber(
            base,
            keys.clone(),
            Arc::clone(&acks),
            epoch,
            ready_tx.clone(),
            stop.clone(),
        )));
        // Connections open a few at a time, not all in one burst.
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(ready_tx);
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0..subscribers {
        match tokio::time::timeout_at(deadline.into(), ready.recv()).await {
            Ok(Some(())) => {}
            _ => bail!("only {i} of {subscribers} subscribers were acknowledged"),
        }
    }
    eprintln!("{subscribers} subscribers ready");
    // Creates at the rate asked, each through the next client, each acknowledgement noted.
    let started = Instant::now();
    let errors = Arc::new(AtomicU64::new(0));
    let mut creates = Vec::with_capacity(planned);
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    for n in 0..planned - 1 {
        let at = started + interval * n as u32;
        tokio::time::sleep_until(at.into()).await;
        let c = clients[n % clients.len()].clone();
        let (acks, errors) = (Arc::clone(&acks), Arc::clone(&errors));
        creates.push(tokio::spawn(async move {
            match c.create_object(CLASS, &json!({"bench_n": n})).await {
                Ok(_) => {
                    acks[n].store(epoch.elapsed().as_micros().max(1) as u64, Ordering::Relaxed)
                }
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for c in creates {
        c.await?;
    }
    let seconds_taken = started.elapsed().as_secs_f64();
    // Let the last events arrive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let measured = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let (mut delivered, mut resyncs) = (0u64, 0u64);
    for s in subs {
        let (d, r, h) = s.await??;
        delivered += d;
        resyncs += r;
        hist.add(h)?;
    }
    let create_errors = errors.load(Ordering::Relaxed);
    Ok(Outcome {
        subscribers,
        creates: (planned - 1) as u64 - create_errors,
        create_errors,
        seconds: seconds_taken.max(measured - 3.0),
        delivered,
        resyncs,
        hist,
    })
}
