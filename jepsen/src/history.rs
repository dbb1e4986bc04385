//! Histories: what clients invoked and what came back, with monotonic timestamps.
//!
//! Each client is a process; an operation is an `Invoke` followed by `Ok` (it happened, with
//! its result), `Fail` (it certainly did not happen) or `Info` (unknown: it may happen at any
//! later time). After an `Info` the client continues as a new process, as in Jepsen.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// The function: `read`, `write`, `incr`, `add`, `append`.
    pub f: String,
    pub key: Option<String>,
    pub value: Value,
    /// Nanoseconds since the run started.
    pub time: u64,
    /// Node index the client talked to.
    pub node: usize,
}

/// One operation: its invocation joined with its completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub process: u64,
    pub f: String,
    pub key: Option<String>,
    /// The invoked value (for writes and increments) or the read value (for reads that
    /// completed ok).
    pub value: Value,
    pub outcome: Kind,
    /// What the completion carried (e.g. the objectId of an acknowledged create).
    pub result: Value,
    pub call: u64,
    /// `u64::MAX` for indeterminate operations.
    pub ret: u64,
}

/// Pairs invocations with completions; an invocation without one counts as `Info`.
pub fn pair(events: &[Event]) -> Vec<Op> {
    let mut open: std::collections::HashMap<u64, &Event> = std::collections::HashMap::new();
    let mut ops = Vec::new();
    for e in events {
        match e.kind {
            Kind::Invoke => {
                open.insert(e.process, e);
            }
            _ => {
                if let Some(inv) = open.remove(&e.process) {
                    // A read's value is what came back; any other op's is what was sent.
                    let value = if inv.f == "read" {
                        e.value.clone()
                    } else {
                        inv.value.clone()
                    };
                    ops.push(Op {
                        process: e.process,
                        f: inv.f.clone(),
                        key: inv.key.clone(),
                        value,
                        outcome: e.kind,
                        result: e.value.clone(),
                        call: inv.time,
                        ret: if e.kind == Kind::Info {
                            u64::MAX
                        } else {
                            e.time
                        },
                    });
                }
            }
        }
    }
    for inv in open.into_values() {
        ops.push(Op {
            process: inv.process,
            f: inv.f.clone(),
            key: inv.key.clone(),
            value: inv.value.clone(),
            outcome: Kind::Info,
            result: Value::Null,
            call: inv.time,
            ret: u64::MAX,
        });
    }
    ops.sort_by_key(|o| (o.call, o.process));
    ops
}

/// Operations grouped by key (operations without a key under "").
pub fn by_key(ops: &[Op]) -> std::collections::BTreeMap<String, Vec<&Op>> {
    let mut map: std::collections::BTreeMap<String, Vec<&Op>> = std::collections::BTreeMap::new();
    for o in ops {
        map.entry(o.key.clone().unwrap_or_default())
            .or_default()
            .push(o);
    }
    map
}

/// Collects events from concurrent clients.
pub struct Recorder {
    start: Instant,
    events: Mutex<Vec<Event>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }
}

impl Recorder {
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    pub fn record(
        &self,
        process: u64,
        kind: Kind,
        f: &str,
        key: Option<&str>,
        value: Value,
        node: usize,
    ) {
        let e = Event {
            process,
            kind,
            f: f.to_string(),
            key: key.map(str::to_string),
            value,
            time: self.now(),
            node,
        };
        if let Ok(mut ev) = self.events.lock() {
            ev.push(e);
        }
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// Writes a history as JSON lines.
pub fn write_jsonl(path: &Path, events: &[Event]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for e in events {
        serde_json::to_writer(&mut f, e)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

/// Reads a history written by [`write_jsonl`].
pub fn read_jsonl(path: &Path) -> std::io::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}
