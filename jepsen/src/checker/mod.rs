//! Checkers: each turns a history into a verdict. `valid` means no anomaly was found,
//! `invalid` comes with the smallest anomaly found, and `unknown` means the checker ran out of
//! its time budget (never reported as valid).

pub mod counter;
pub mod linearizable;
pub mod list_append;
pub mod set;
pub mod unique;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    Valid,
    Invalid { anomaly: Value },
    Unknown { reason: String },
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid { .. } => "invalid",
            Verdict::Unknown { .. } => "unknown",
        }
    }

    /// Combines verdicts of parts: invalid beats unknown beats valid.
    pub fn and(self, other: Verdict) -> Verdict {
        match (self, other) {
            (v @ Verdict::Invalid { .. }, _) | (_, v @ Verdict::Invalid { .. }) => v,
            (v @ Verdict::Unknown { .. }, _) | (_, v @ Verdict::Unknown { .. }) => v,
            _ => Verdict::Valid,
        }
    }
}
