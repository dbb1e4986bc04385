//! `Job`: one kind of periodic work the scheduler runs on the metadata group's leader.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::replicas::Replicas;

/// A periodic job run by the scheduler.
pub trait Job: Send + Sync {
    fn name(&self) -> &'static str;
    fn period(&self) -> Duration;
    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>>;
}
