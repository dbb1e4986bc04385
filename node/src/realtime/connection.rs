//! One client's realtime session, whatever its transport: who it is, its subscriptions, and its
//! outbox (`outbox`: bounded; a slow subscriber is dropped with a resync, never slowing writes
//! or other subscribers).
//!
//! Who subscribes: the app and session the connection authenticated with (keys on the upgrade
//! request or in its query), or — for the hosted service's socket.io SDKs, which name only the
//! app — the app named by each `client_sub`'s `appKey`, acting as anyone (or as its
//! `sessionToken`'s user), unless the app requires its keys (`realtimeKeysRequired`) or signed
//! requests.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use basalt_cluster::Cluster;

use super::cursor::Cursor;
use super::hub::{Entry, Hub};
use super::outbox::{Outbox, OutboxReceiver};
use super::subscription::Subscription;
use super::wire::{parse_client, Action, ClientMessage, Outbound, SubRequest};
use super::RealtimeError;
use crate::apps::find_app;
use crate::auth::RequestCtx;
use crate::users::roles::RoleGraphs;

/// Subscriptions one connection may hold.
pub const MAX_SUBSCRIPTIONS: usize = 100;

/// The key of a subscription within a connection: subscribing again replaces it.
type SubKey = (Action, String, Option<String>);

/// What connections work with: the cluster, the role graphs (principals) and the hub.
#[derive(Clone)]
pub struct Services {
    pub cluster: Cluster,
    pub roles: Arc<RoleGraphs>,
    pub hub: Hub,
}

/// A refused client message, and the subscription it asked for, if it named one.
pub type Refusal = (RealtimeError, Option<SubRequest>);

pub struct Connection {
    services: Services,
    /// The app and session the connection authenticated with, if it did.
    ctx: Option<RequestCtx>,
    /// The browser origin of the upgrade request, if any (checked for apps named by
    /// `appKey`; a connection with keys was checked when it authenticated).
    origin: Option<String>,
    outbox: Arc<Outbox>,
    subs: HashMap<SubKey, Arc<Entry>>,
}

impl Connection {
    /// A connection and the receiving end of its outbox.
    pub fn new(
        services: Services,
        ctx: Option<RequestCtx>,
        origin: Option<String>,
    ) -> (Connection, OutboxReceiver) {
        let (outbox, rx) = Outbox::new();
        let outbox = Arc::new(outbox);
        metrics::gauge!("basalt_realtime_connections").increment(1.0);
        let conn = Connection {
            services,
            ctx,
            origin,
            outbox,
            subs: HashMap::new(),
        };
        (conn, rx)
    }

    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The message that tells a dropped slow client to read the state again.
    pub fn slow_resync(&self) -> Outbound {
        Outbound::new(
            "server_resync",
            &json!({"reason": "slow", "error": "the connection fell behind and was closed."}),
        )
    }

    /// Handles one text message of the client (the transport answers a refusal).
    pub async fn handle_text(&mut self, text: &str) -> Result<(), Refusal> {
        match parse_client(text) {
            Ok(ClientMessage::Subscribe(req)) => {
                let r = self.subscribe(&req).await;
                r.map_err(|e| (e, Some(req)))
            }
            Ok(ClientMessage::Unsubscribe(req)) => {
                self.unsubscribe(&req);
                Ok(())
            }
            Err(e) => Err((e, None)),
        }
    }

    /// The context a subscription acts in (see the module documentation).
    async fn context_for(&self, req: &SubRequest) -> Result<RequestCtx, RealtimeError> {
        if let Some(ctx) = &self.ctx {
            if !req.app_key.is_empty() && req.app_key != ctx.app.application_id.as_str() {
                return Err(RealtimeError::Unauthorized(
                    "appKey is not the connection's app",
                ));
            }
            return Ok(match &req.session_token {
                Some(t) => ctx.for_operation(Some(t.clone())),
                None => ctx.clone(),
            });
        }
        if req.app_key.is_empty() {
            return Err(RealtimeError::Unauthorized("no appKey"));
        }
        let app = find_app(&self.services.cluster, &req.app_key)
            .await?
            .ok_or(RealtimeError::Unauthorized("unknown appKey"))?;
        if app.status == 0 {
            return Err(RealtimeError::AppDisabled);
        }
        if app.realtime_keys_required || app.disable_standard_mode {
            return Err(RealtimeError::Unauthorized(
                "this app needs its keys to subscribe",
            ));
        }
        if let Some(origin) = &self.origin {
            if !app.allows_origin(origin) {
                return Err(RealtimeError::Unauthorized(
                    "origin not allowed for this app",
                ));
            }
        }
        Ok(RequestCtx {
            app: Arc::new(app),
            master: false,
            encrypted: false,
            session_token: req.session_token.clone(),
            principals: Default::default(),
            body_signature: None,
        })
    }

    /// Subscribes (replacing a subscription of the same action, class and object).
    pub async fn subscribe(&mut self, req: &SubRequest) -> Result<(), RealtimeError> {
        if self.subs.len() >= MAX_SUBSCRIPTIONS && !self.subs.contains_key(&key_of(req)) {
            return Err(RealtimeError::InvalidMessage(format!(
                "a connection holds at most {MAX_SUBSCRIPTIONS} subscriptions."
            )));
        }
        let ctx = self.context_for(req).await?;
        let s = &self.services;
        let who = crate::users::session::principals(&s.cluster, &s.roles, &ctx).await?;
        let sub = Subscription::new(Arc::clone(&ctx.app), req.clone(), who)?;
        let hub: Hub = self.services.hub.clone();
        let cursor = match &req.cursor {
            Some(c) => Some(Cursor::parse(c, hub.cursor_groups())?),
            None => None,
        };
        self.unsubscribe(req);
        let entry = hub.subscribe(sub, Arc::clone(&self.outbox), cursor).await?;
        self.subs.insert(key_of(req), entry);
        Ok(())
    }

    /// Ends the subscription of the same action, class and object, if any.
    pub fn unsubscribe(&mut self, req: &SubRequest) {
        if let Some(entry) = self.subs.remove(&key_of(req)) {
            self.services.hub.unsubscribe(&entry);
        }
    }
}

fn key_of(req: &SubRequest) -> SubKey {
    (req.action, req.table.clone(), req.object_id.clone())
}

impl Drop for Connection {
    fn drop(&mut self) {
        for (_, entry) in self.subs.drain() {
            self.services.hub.unsubscribe(&entry);
        }
        metrics::gauge!("basalt_realtime_connections").decrement(1.0);
    }
}
