//! `QueryError`: what building and running a query reports; `api::error` converts it into the
//! API's codes (102 for a query that is not valid).

use basalt_cluster::Error as ClusterError;

use crate::users::UsersError;

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// A parameter, filter, include key or answer outside the query rules.
    #[error("{0}")]
    Invalid(String),
    /// Finding the caller's principals, or a query on protected user fields.
    #[error(transparent)]
    Users(#[from] UsersError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl QueryError {
    /// A cluster error of a query: a value the cluster refused makes the query invalid.
    pub fn from_cluster(e: ClusterError) -> Self {
        match e {
            ClusterError::InvalidValue(m) => QueryError::Invalid(m),
            other => QueryError::Cluster(other),
        }
    }
}
