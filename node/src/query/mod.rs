//! The query model both query languages build (the REST parameters of spec 4.3/4.4 in
//! `params`, BQL in `bql`) and its execution over the cluster.
//!
//! `run` applies the limit caps, finds the caller's principals, resolves sub-queries on the
//! coordinator (`Coordinator::resolve`), sends the scan or the aggregation to every shard
//! (`Coordinator::scan` / `aggregate`: scatter-gather with the shards' partial
//! results merged here), then hides other users' private fields (`users::protected`), restricts
//! `keys` and expands `include` (`projection`).

pub mod bql;
mod error;
pub mod params;
pub mod projection;

use basalt_cluster::names::ClassName;
use basalt_cluster::object::validate_class_name;
use basalt_cluster::query::aggregate::{finish, AggregateRequest, AggregateSpec, Metric};
use basalt_cluster::query::filter::Filter;
use basalt_cluster::query::{ScanRequest, SortKey};
use basalt_cluster::Error as ClusterError;
use serde_json::{json, Value};

use basalt_cluster::Cluster;

use crate::auth::RequestCtx;
use crate::users::protected::UserView;
use crate::users::roles::RoleGraphs;
use crate::users::session::principals;
pub use error::QueryError;
use projection::{expand, project, IncludeKey};

/// Default and largest `limit` of a query (spec 4.3; a larger limit is capped), and the
/// largest for an app on the enterprise plan.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 500;
pub const MAX_LIMIT_ENTERPRISE: usize = 1000;

/// One query of a class.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub class: String,
    /// The `where`, sub-queries not yet resolved.
    pub filter: Filter,
    pub order: Vec<SortKey>,
    pub skip: usize,
    /// `None`: the default limit.
    pub limit: Option<usize>,
    /// Also count every matching object.
    pub count: bool,
    /// Fields to return (empty: all); included keys are always returned.
    pub keys: Vec<String>,
    pub include: Vec<IncludeKey>,
    pub aggregation: Option<Aggregation>,
    /// A lower cap on `limit` than the app's (BQL returns at most 1000 rows).
    pub max_limit: Option<usize>,
}

/// The aggregation part of a query (spec 4.4).
#[derive(Debug, Clone, Default)]
pub struct Aggregation {
    pub spec: AggregateSpec,
    /// A `where` over the result rows.
    pub having: Filter,
}

/// What a query found.
#[derive(Debug)]
pub enum Outcome {
    /// Objects, and their total count when asked for.
    Rows {
        rows: Vec<Value>,
        count: Option<u64>,
    },
    /// Aggregated rows.
    Groups(Vec<Value>),
}

/// Parses the metric parameters of spec 4.4 (`sum=a,b&max=c` ...) into `spec`.
pub fn add_metrics(spec: &mut AggregateSpec, metric: Metric, columns: &str) {
    for c in columns.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if !spec.metrics.contains(&(metric, c.to_string())) {
            spec.metrics.push((metric, c.to_string()));
        }
    }
}

/// Rejects paths into the service's own fields (`_password`, `_sessions`, ...).
pub fn check_paths(filter: &Filter) -> Result<(), QueryError> {
    if filter.any_path(&|p| p.starts_with('_')) {
        return Err(QueryError::Invalid(
            "fields starting with _ cannot be queried.".into(),
        ));
    }
    Ok(())
}

/// Runs `q` as the caller of `ctx`.
pub async fn run(
    cluster: &Cluster,
    roles: &RoleGraphs,
    ctx: &RequestCtx,
    q: Query,
) -> Result<Outcome, QueryError> {
    check_paths(&q.filter)?;
    let max = match q.max_limit {
        Some(m) => m,
        None if ctx.app.enterprise => MAX_LIMIT_ENTERPRISE,
        None => MAX_LIMIT,
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).min(max);
    let app = &ctx.app.application_id;
    let _slot = cluster
        .queries()
        .admit()
        .map_err(QueryError::from_cluster)?;
    let who = principals(cluster, roles, ctx).await?;
    let view = UserView::new(&ctx.app, &who);
    let named = q.order.iter().map(|k| k.field.as_str()).chain(
        q.aggregation
            .iter()
            .flat_map(|a| {
                a.spec
                    .group_by
                    .iter()
                    .chain(a.spec.metrics.iter().map(|(_, c)| c))
            })
            .map(String::as_str),
    );
    view.check_query(&q.class, &q.filter, named)?;
    // Every caller checked the name its request gave (a user class, or a system class it may
    // read); one no class can have is refused all the same, with the check's own answer.
    let Some(class) = ClassName::in_query(&q.class) else {
        validate_class_name(&q.class).map_err(QueryError::from_cluster)?;
        return Err(QueryError::from_cluster(ClusterError::InvalidClassName(
            q.class,
        )));
    };
    let filter = cluster
        .queries()
        .resolve(app, q.filter, &who)
        .await
        .map_err(QueryError::from_cluster)?;
    if let Some(agg) = q.aggregation {
        let groups = cluster
            .queries()
            .aggregate(AggregateRequest {
                app: app.clone(),
                class,
                filter,
                spec: agg.spec.clone(),
                principals: who.clone(),
            })
            .await
            .map_err(QueryError::from_cluster)?;
        let rows = finish(&agg.spec, groups, &agg.having, &q.order, q.skip, limit)
            .map_err(QueryError::from_cluster)?;
        return Ok(Outcome::Groups(rows));
    }
    let req_class = class.clone();
    // Included keys are returned even when `keys` leaves them out.
    let mut keys = q.keys;
    if !keys.is_empty() {
        keys.extend(q.include.iter().map(|i| i.key.clone()));
    }
    let req = ScanRequest {
        app: app.clone(),
        class,
        filter,
        order: q.order,
        skip: q.skip,
        limit,
        principals: who.clone(),
        count: q.count,
        keys: keys.clone(),
    };
    let (mut rows, count) = cluster
        .queries()
        .scan(req)
        .await
        .map_err(QueryError::from_cluster)?;
    view.hide_rows(&req_class, &mut rows);
    project(&mut rows, &keys);
    expand(cluster, app, &mut rows, &q.include, &who, &view).await?;
    basalt_cluster::limits::check_answer(&rows, basalt_cluster::limits::MAX_ANSWER_BYTES)
        .map_err(QueryError::from_cluster)?;
    Ok(Outcome::Rows {
        rows,
        count: q.count.then_some(count),
    })
}

/// The REST answer of an outcome: `{results[, count]}` for objects; aggregated rows as a bare
/// array, or `{results}` when the app wraps aggregates (decisions.md).
pub fn rest_body(outcome: Outcome, wrap_aggregates: bool) -> Value {
    match outcome {
        Outcome::Rows { rows, count: None } => json!({ "results": rows }),
        Outcome::Rows {
            rows,
            count: Some(c),
        } => json!({ "results": rows, "count": c }),
        Outcome::Groups(rows) if wrap_aggregates => json!({ "results": rows }),
        Outcome::Groups(rows) => Value::Array(rows),
    }
}
