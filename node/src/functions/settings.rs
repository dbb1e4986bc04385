//! An app's limits on its functions (`functions` in its app record, set through app
//! management): wall time, heap and stack of each invocation, and the hosts its functions may
//! `fetch` from (none by default: no network). Absent members take the defaults.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::engine::Limits;

pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_MEMORY_MB: u64 = 64;
pub const DEFAULT_STACK_KB: u64 = 1024;
const TIMEOUT_MS: (u64, u64) = (10, 120_000);
const MEMORY_MB: (u64, u64) = (4, 1024);
const STACK_KB: (u64, u64) = (64, 8192);
const CONCURRENCY: (u64, u64) = (1, 1024);
/// Hosts an app may allow.
const MAX_FETCH_HOSTS: usize = 64;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_kb: Option<u64>,
    /// Invocations of the app's functions a node runs at once (never more than the node's
    /// `--function-threads`); by default half of them (`runner::Runner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// `host` or `host:port` names `fetch` may reach (http or https).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fetch_allow: Vec<String>,
}

impl crate::apps::AppSettings for FunctionSettings {
    fn stored(app: &crate::apps::AppRecord) -> Option<&crate::apps::FeatureSettings> {
        app.functions.as_ref()
    }
}

impl FunctionSettings {
    /// Parses and checks the `functions` member of an app-management body.
    pub fn parse(v: &Value) -> Result<FunctionSettings, String> {
        let Some(members) = v.as_object() else {
            return Err("functions must be an object (or null).".into());
        };
        // (checked here, not when stored records are read: a newer node may add members)
        for k in members.keys() {
            if ![
                "timeoutMs",
                "memoryMb",
                "stackKb",
                "concurrency",
                "fetchAllow",
            ]
            .contains(&k.as_str())
            {
                return Err(format!(
                    "functions: unknown member {k:?} (members: timeoutMs, memoryMb, stackKb, \
                     concurrency, fetchAllow)."
                ));
            }
        }
        let s: FunctionSettings = serde_json::from_value(v.clone()).map_err(|e| {
            format!(
                "functions: {e} (members: timeoutMs, memoryMb, stackKb, concurrency, \
                 fetchAllow [host or host:port])."
            )
        })?;
        let within = |what: &str, v: Option<u64>, (lo, hi): (u64, u64)| match v {
            Some(n) if !(lo..=hi).contains(&n) => {
                Err(format!("functions.{what} must be from {lo} to {hi}."))
            }
            _ => Ok(()),
        };
        within("timeoutMs", s.timeout_ms, TIMEOUT_MS)?;
        within("memoryMb", s.memory_mb, MEMORY_MB)?;
        within("stackKb", s.stack_kb, STACK_KB)?;
        within("concurrency", s.concurrency, CONCURRENCY)?;
        if s.fetch_allow.len() > MAX_FETCH_HOSTS {
            return Err(format!(
                "functions.fetchAllow lists at most {MAX_FETCH_HOSTS} hosts."
            ));
        }
        for h in &s.fetch_allow {
            let ok = !h.is_empty()
                && h.len() <= 253
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c));
            if !ok {
                return Err(format!(
                    "functions.fetchAllow: {h:?} is not a host or host:port."
                ));
            }
        }
        Ok(s)
    }

    /// The limits of one invocation.
    pub fn limits(&self) -> Limits {
        Limits {
            wall: Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            memory_bytes: (self.memory_mb.unwrap_or(DEFAULT_MEMORY_MB) << 20) as usize,
            stack_bytes: (self.stack_kb.unwrap_or(DEFAULT_STACK_KB) << 10) as usize,
            concurrency: self.concurrency.map(|n| n as usize),
        }
    }

    /// Whether `fetch` may reach `url` (its host, or host:port, is listed).
    pub fn may_fetch(&self, url: &url::Url) -> bool {
        if !matches!(url.scheme(), "http" | "https") {
            return false;
        }
        let Some(host) = url.host_str() else {
            return false;
        };
        let with_port = url.port_or_known_default().map(|p| format!("{host}:{p}"));
        self.fetch_allow.iter().any(|h| {
            h.eq_ignore_ascii_case(host)
                || with_port
                    .as_deref()
                    .is_some_and(|hp| h.eq_ignore_ascii_case(hp))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn settings_are_checked_and_give_limits() {
        let s = FunctionSettings::parse(&json!({})).unwrap();
        assert_eq!(s.limits().wall, Duration::from_secs(10));
        assert_eq!(s.limits().memory_bytes, 64 << 20);
        let s = FunctionSettings::parse(
            &json!({"timeoutMs": 500, "memoryMb": 8, "fetchAllow": ["127.0.0.1:9000", "api.example.com"]}),
        )
        .unwrap();
        assert_eq!(s.limits().wall, Duration::from_millis(500));
        assert_eq!(s.limits().memory_bytes, 8 << 20);
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(s.may_fetch(&u("http://127.0.0.1:9000/x")));
        assert!(!s.may_fetch(&u("http://127.0.0.1:9001/x")));
        assert!(s.may_fetch(&u("https://api.example.com/v1")));
        assert!(!s.may_fetch(&u("https://example.com/")));
        assert!(!s.may_fetch(&u("ftp://api.example.com/")));
        for bad in [
            json!({"timeoutMs": 0}),
            json!({"memoryMb": 100000}),
            json!({"stackKb": 1}),
            json!({"concurrency": 0}),
            json!({"fetchAllow": ["a b"]}),
            json!({"other": 1}),
            json!([]),
        ] {
            assert!(FunctionSettings::parse(&bad).is_err(), "{bad}");
        }
    }
}
