//! Takes the split or merge under way a step further (`services::splits::round`): one phase,
//! or a few pages of its copy or drop; with none under way, begins a split of a group above
//! the size or load limits, or a merge of a small quiet one (`services::splits::AutoSplits`);
//! its copy and drop at the pace it keeps between rounds (`services::split_pace::MovePace`).

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::error::Result;
use crate::replicas::Replicas;
use crate::services::split_pace::MovePace;
use crate::services::splits::{AutoSplits, Switched};

pub struct Splits {
    pub every: Duration,
    pub switched: Switched,
    pub auto: AutoSplits,
    pub pace: MovePace,
}

impl Job for Splits {
    fn name(&self) -> &'static str {
        "splits"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        Box::pin(crate::services::splits::round(
            replicas,
            &self.switched,
            &self.auto,
            &self.pace,
        ))
    }
}
