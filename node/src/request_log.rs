//! This node's recent requests and its warn and error log lines, each kind in a bounded ring
//! (`--request-log-entries`; lines: a tenth of it) that `GET /admin/logs` reads
//! (`api::ops::logs`); with `--request-log-json` every request is also written to stdout as one
//! JSON line, for log shippers, by a thread of its own (a reader that stalls makes lines drop,
//! counted by `basalt_request_log_json_dropped_total`, never requests wait). `server::observe`
//! records requests (with the app id they named, also when their keys were refused);
//! `LinesLayer`, a tracing layer, records the lines. Memory: an entry's strings are cut to `MAX_FIELD` bytes and a
//! line's message to `MAX_MESSAGE`, so the rings hold at most a few MiB.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// Longest app id, route, client address or request id kept.
const MAX_FIELD: usize = 128;
/// Longest message of a log line kept.
const MAX_MESSAGE: usize = 2048;
/// Most entries `GET /admin/logs` answers at once.
pub const MAX_ANSWER: usize = 1000;

/// One request, as it was answered.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestEntry {
    pub at_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    pub method: String,
    /// The route's template (`/1/classes/{class}`), not the path: no object ids or tokens.
    pub route: String,
    pub status: u16,
    pub latency_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    pub request_id: String,
}

/// One warn or error line of the node's log.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    pub at_ms: i64,
    pub level: String,
    pub target: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

struct Rings {
    requests: Mutex<VecDeque<RequestEntry>>,
    lines: Mutex<VecDeque<LogLine>>,
    max_requests: usize,
    max_lines: usize,
    /// JSON lines for stdout, written by a thread of their own (`--request-log-json`).
    json_stdout: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
}

/// JSON lines queued for stdout; past it (a stalled reader) lines are dropped and counted.
const JSON_QUEUE: usize = 4096;

/// Writes queued JSON lines to stdout until the process ends.
fn json_writer() -> std::sync::mpsc::SyncSender<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(JSON_QUEUE);
    let spawned = std::thread::Builder::new()
        .name("request-log-json".into())
        .spawn(move || {
            let mut out = std::io::stdout();
            while let Ok(line) = rx.recv() {
                if out.write_all(&line).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no thread for --request-log-json: {e}");
    }
    tx
}

static RINGS: OnceLock<Rings> = OnceLock::new();

/// Keeps up to `entries` requests (and a tenth as many lines, at least 100), and writes each
/// request to stdout as JSON when `json_stdout`. Once per process; later calls change nothing.
pub fn install(entries: usize, json_stdout: bool) {
    let _ = RINGS.set(Rings {
        requests: Mutex::new(VecDeque::new()),
        lines: Mutex::new(VecDeque::new()),
        max_requests: entries,
        max_lines: (entries / 10).max(100),
        json_stdout: json_stdout.then(json_writer),
    });
}

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn push<T>(ring: &Mutex<VecDeque<T>>, max: usize, item: T) {
    if max == 0 {
        return;
    }
    let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
    while ring.len() >= max {
        ring.pop_front();
    }
    ring.push_back(item);
}

/// Records a request (nothing before `install`).
pub fn record(mut entry: RequestEntry) {
    let Some(rings) = RINGS.get() else { return };
    entry.app = entry.app.map(|a| cut(a, MAX_FIELD));
    entry.route = cut(entry.route, MAX_FIELD);
    entry.client = entry.client.map(|c| cut(c, MAX_FIELD));
    entry.request_id = cut(entry.request_id, MAX_FIELD);
    if let Some(tx) = &rings.json_stdout {
        if let Ok(mut line) = serde_json::to_vec(&entry) {
            line.push(b'\n');
            if tx.try_send(line).is_err() {
                metrics::counter!("basalt_request_log_json_dropped_total").increment(1);
            }
        }
    }
    push(&rings.requests, rings.max_requests, entry);
}

/// Which entries to answer.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this app's requests.
    pub app: Option<String>,
    /// Only entries at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Only this status, or this class (`5` for 5xx).
    pub status: Option<u16>,
    /// At most this many, the newest.
    pub limit: usize,
}

impl Filter {
    fn status_matches(&self, status: u16) -> bool {
        match self.status {
            None => true,
            Some(s) if s < 10 => status / 100 == s,
            Some(s) => status == s,
        }
    }
}

/// The newest requests `filter` admits, oldest first.
pub fn requests(filter: &Filter) -> Vec<RequestEntry> {
    let Some(rings) = RINGS.get() else {
        return Vec::new();
    };
    let ring = rings.requests.lock().unwrap_or_else(|p| p.into_inner());
    let mut out: Vec<RequestEntry> = ring
        .iter()
        .rev()
        .filter(|e| {
            filter
                .app
                .as_ref()
                .is_none_or(|a| e.app.as_ref() == Some(a))
        })
        .filter(|e| filter.since_ms.is_none_or(|s| e.at_ms >= s))
        .filter(|e| filter.status_matches(e.status))
        .take(filter.limit.min(MAX_ANSWER))
        .cloned()
        .collect();
    out.reverse();
    out
}

/// The newest warn and error lines at or after `since_ms`, oldest first.
pub fn lines(since_ms: Option<i64>, limit: usize) -> Vec<LogLine> {
    let Some(rings) = RINGS.get() else {
        return Vec::new();
    };
    let ring = rings.lines.lock().unwrap_or_else(|p| p.into_inner());
    let mut out: Vec<LogLine> = ring
        .iter()
        .rev()
        .filter(|l| since_ms.is_none_or(|s| l.at_ms >= s))
        .take(limit.min(MAX_ANSWER))
        .cloned()
        .collect();
    out.reverse();
    out
}

/// Records the node's warn and error events as lines (after `install`).
pub struct LinesLayer;

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if self.0.len() >= MAX_MESSAGE {
            return;
        }
        if field.name() == "message" {
            self.0 = format!("{value:?} {}", self.0).trim_end().to_string();
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = format!("{value} {}", self.0).trim_end().to_string();
        } else {
            self.record_debug(field, &value);
        }
    }
}

impl<S: Subscriber> Layer<S> for LinesLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let Some(rings) = RINGS.get() else { return };
        let mut message = Message(String::new());
        event.record(&mut message);
        push(
            &rings.lines,
            rings.max_lines,
            LogLine {
                at_ms: chrono::Utc::now().timestamp_millis(),
                level: level.to_string(),
                target: cut(event.metadata().target().to_string(), MAX_FIELD),
                message: cut(message.0, MAX_MESSAGE),
                request_id: basalt_cluster::request_id::current(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_keeps_its_newest_entries_only() {
        let ring = Mutex::new(VecDeque::new());
        for n in 0..1000 {
            push(&ring, 10, n);
        }
        let kept: Vec<i32> = ring.into_inner().unwrap().into_iter().collect();
        assert_eq!(kept, (990..1000).collect::<Vec<_>>());
        let none = Mutex::new(VecDeque::new());
        push(&none, 0, 1);
        assert!(none.into_inner().unwrap().is_empty());
    }

    #[test]
    fn long_fields_are_cut_on_a_character_boundary() {
        let long = "é".repeat(5000);
        let cut_to = cut(long, MAX_FIELD);
        assert!(cut_to.len() <= MAX_FIELD && cut_to.chars().all(|c| c == 'é'));
        assert_eq!(cut("short".into(), MAX_FIELD), "short");
    }
}
