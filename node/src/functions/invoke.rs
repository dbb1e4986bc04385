//! Running a function for a caller: [`Invoker`] gives each invocation a `host::NodeHost` whose
//! data calls go through the node's own router as the caller (`dispatch`, one level deeper in
//! functions than the caller: [`CallDepth`]), within the app's limits (`settings`), on this
//! node's slots (`runner`). Its callers: `api::functions` (a direct call), `triggers` (a class's
//! hooks around its writes) and `cron` (through [`Invoker::scheduled`], as the app's master
//! key). Neighbours: `auth::RequestCtx` (who calls), `users` (the caller's user as it sees
//! itself).

use std::sync::{Arc, OnceLock};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::Router;
use basalt_cluster::names::ObjectId;
use basalt_cluster::Cluster;
use serde_json::Value;
use tower::ServiceExt;

use super::cron::Invoke;
use super::engine::RunError;
use super::host::{Dispatch, NodeHost};
use super::record::FunctionRecord;
use super::runner::{Invocation, Runner};
use super::settings::FunctionSettings;
use super::FunctionsError;
use crate::auth::RequestCtx;
use crate::users::protected::UserView;
use crate::users::roles::RoleGraphs;
use crate::users::session::{principals, session_user};
use crate::users::USER_CLASS;

/// How deep in functions calling functions a request runs: 0 from outside; a function's data
/// calls carry one more (an extension only [`Invoker::dispatch`] sets).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallDepth(pub u8);

impl<S: Send + Sync> FromRequestParts<S> for CallDepth {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<CallDepth>()
            .copied()
            .unwrap_or_default())
    }
}

/// What running functions for this node's callers takes: its slots, its cluster and role
/// graphs (the caller's user), and the node's router (set once it is built).
#[derive(Clone)]
pub struct Invoker {
    pub runner: Runner,
    pub(super) cluster: Cluster,
    roles: Arc<RoleGraphs>,
    router: Arc<OnceLock<Router>>,
}

impl Invoker {
    pub fn new(
        runner: Runner,
        cluster: Cluster,
        roles: Arc<RoleGraphs>,
        router: Arc<OnceLock<Router>>,
    ) -> Invoker {
        Invoker {
            runner,
            cluster,
            roles,
            router,
        }
    }

    /// Runs requests through the node's router as `ctx`'s caller (or with the master key), one
    /// level deeper than `depth`.
    pub fn dispatch(&self, ctx: &RequestCtx, depth: u8) -> Result<Dispatch, RunError> {
        let router = self
            .router
            .get()
            .cloned()
            .ok_or_else(|| RunError::Engine("functions' router not set".into()))?;
        let caller = ctx.for_operation(None);
        Ok(Arc::new(move |mut req, master| {
            let mut as_who = caller.for_operation(None);
            as_who.master |= master;
            req.extensions_mut().insert(as_who);
            req.extensions_mut()
                .insert(CallDepth(depth.saturating_add(1)));
            let router = router.clone();
            Box::pin(async move {
                match router.oneshot(req).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                }
            })
        }))
    }

    /// Runs `function` with `request` for `ctx`'s caller at `depth` (`detached`: nobody waits
    /// for it).
    pub async fn invoke(
        &self,
        ctx: &RequestCtx,
        depth: u8,
        detached: bool,
        function: &FunctionRecord,
        request: Value,
    ) -> Result<Value, RunError> {
        let settings: FunctionSettings = ctx
            .app
            .settings()
            .map_err(|e| RunError::Engine(e.to_string()))?;
        let host = NodeHost {
            dispatch: self.dispatch(ctx, depth)?,
            app: ctx.app.application_id.to_string(),
            function: function.name.clone(),
            request_id: basalt_cluster::request_id::current(),
            settings: settings.clone(),
            http: self.runner.http(),
        };
        self.runner
            .run(Invocation {
                app: ctx.app.application_id.to_string(),
                function: function.name.clone(),
                body: function.source.clone(),
                request,
                limits: settings.limits(),
                host: Arc::new(host),
                depth,
                detached,
            })
            .await
    }

    /// The caller's user as it sees itself, or `null` without a live session.
    pub async fn caller_user(&self, ctx: &RequestCtx) -> Result<Value, FunctionsError> {
        let Some(token) = ctx.session_token.as_deref() else {
            return Ok(Value::Null);
        };
        let app = &ctx.app.application_id;
        let Some((user_id, _)) = session_user(&self.cluster, app, token).await? else {
            return Ok(Value::Null);
        };
        let Some(id) = ObjectId::parse(&user_id) else {
            return Ok(Value::Null);
        };
        let who = principals(&self.cluster, &self.roles, ctx).await?;
        let user = self
            .cluster
            .get_object_as(app, &USER_CLASS, &id, who.clone())
            .await?;
        Ok(match user {
            Some(user) => {
                let mut rows = [user];
                UserView::new(&ctx.app, &who).hide_rows(&USER_CLASS, &mut rows);
                let [user] = rows;
                user
            }
            None => Value::Null,
        })
    }

    /// How the scheduler runs a scheduled function: as its app's master key, from outside
    /// (depth 0), under a request id of its own.
    pub fn scheduled(&self) -> Invoke {
        let invoker = self.clone();
        Arc::new(move |app, function, request| {
            let invoker = invoker.clone();
            Box::pin(async move {
                let started = std::time::Instant::now();
                let id = format!("cron-{}", crate::apps::random_key(12));
                let run = async {
                    let app = crate::apps::find_app(&invoker.cluster, &app)
                        .await
                        .map_err(|e| RunError::Engine(e.to_string()))?
                        .ok_or_else(|| RunError::Engine(format!("no app {app}")))?;
                    let ctx = RequestCtx {
                        app: Arc::new(app),
                        master: true,
                        encrypted: false,
                        session_token: None,
                        principals: Default::default(),
                        body_signature: None,
                    };
                    invoker.invoke(&ctx, 0, false, &function, request).await
                };
                let outcome = basalt_cluster::request_id::scope(id, run).await;
                (started.elapsed(), outcome)
            })
        })
    }
}
