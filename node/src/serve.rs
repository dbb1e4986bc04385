//! `basalt serve`: one node — the cluster part and the HTTP API — until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use basalt_cluster::{Bootstrap, Cluster, ClusterOptions, RaftTuning};

use crate::api::context::{AppState, HeaderNames, Outside};
use crate::api::ops::install_metrics_recorder;
use crate::bootstrap::{bootstrap, describe};
use crate::users::third_party::providers::IdentityProviders;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// This node's id (a positive integer, unique in the cluster).
    #[arg(long)]
    pub node_id: u64,
    /// Directory for this node's data.
    #[arg(long, default_value = "./data")]
    pub data_dir: PathBuf,
    /// Address the REST API listens on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Address the node-to-node gRPC service listens on.
    #[arg(long, default_value = "127.0.0.1:9080")]
    pub rpc_addr: SocketAddr,
    /// The gRPC address peers should dial (default: --rpc-addr); for proxies and NAT.
    #[arg(long)]
    pub rpc_advertise: Option<String>,
    /// Local IP outgoing peer connections are made from (default: the system's choice).
    #[arg(long)]
    pub rpc_source_ip: Option<std::net::IpAddr>,
    /// Create a new cluster with this node as its first member.
    #[arg(long, conflicts_with = "join")]
    pub init: bool,
    /// Join the cluster of the node at this gRPC address.
    #[arg(long)]
    pub join: Option<String>,
    /// Data shards of a new cluster (fixed at --init).
    #[arg(long, default_value_t = 16)]
    pub shards: u32,
    /// Replicas per group of a new cluster (capped by the number of nodes).
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Brand word of the header names (`X-<brand>-Application-Id`).
    #[arg(long, default_value = "Service")]
    pub header_brand: String,
    /// Largest JSON request body, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub max_body_bytes: usize,
    /// SMTP relay for mails (`smtp://host:port`); without one, mails go to
    /// `<data-dir>/outbox/` and the log.
    #[arg(long)]
    pub smtp_url: Option<String>,
    /// Sender address of mails.
    #[arg(long, default_value = "Basalt <noreply@basalt.local>")]
    pub smtp_from: String,
    /// URL that receives each SMS as a JSON POST (the operator's gateway); without one, SMS
    /// go to `<data-dir>/sms-outbox/` and the log.
    #[arg(long)]
    pub sms_webhook_url: Option<String>,
    /// Base URL of links in mails and of captcha pictures (default: `http://<http-addr>`).
    #[arg(long)]
    pub public_url: Option<String>,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 250)]
    pub heartbeat_ms: u64,
    /// Smallest Raft election timeout in milliseconds (the largest is twice this).
    #[arg(long, default_value_t = 1200)]
    pub election_ms: u64,
    /// Entries applied since the last snapshot that trigger a new one.
    #[arg(long, default_value_t = 20_000)]
    pub snapshot_logs: u64,
    /// Entries kept in the log behind a snapshot.
    #[arg(long, default_value_t = 1_000)]
    pub keep_logs: u64,
    /// Seconds between sweeps of expired records.
    #[arg(long, default_value_t = 5)]
    pub ttl_sweep_secs: u64,
    /// Seconds between snapshot/compaction rounds.
    #[arg(long, default_value_t = 600)]
    pub compact_secs: u64,
    /// Seconds a client has to send a request's head before its connection is closed.
    #[arg(long, default_value_t = 10)]
    pub http_header_timeout_secs: u64,
    /// Seconds a keep-alive connection may stay idle between requests.
    #[arg(long, default_value_t = 30)]
    pub http_idle_timeout_secs: u64,
    /// Seconds a client has to send a request's whole body (408 after).
    #[arg(long, default_value_t = 60)]
    pub http_body_timeout_secs: u64,
    /// Open HTTP connections per node; more are closed at once.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Open HTTP connections per client IP address; more are closed at once.
    #[arg(long, default_value_t = 256)]
    pub max_connections_per_ip: usize,
    /// Failed logins (users and console) per client IP per minute on this node; 0: no limit.
    #[arg(long, default_value_t = 30)]
    pub login_attempts_per_ip: u32,
    /// `requestSmsCode` calls per client IP per minute on this node; 0: no limit.
    #[arg(long, default_value_t = 5)]
    pub sms_requests_per_ip: u32,
    /// Mail requests (password reset, email verification) per client IP per minute on this
    /// node; 0: no limit.
    #[arg(long, default_value_t = 10)]
    pub mail_requests_per_ip: u32,
    /// Base URL of a platform's service for verifying `authData` (`PLATFORM=URL`, repeatable;
    /// default: the platform's own, e.g. `weapp=https://api.weixin.qq.com`).
    #[arg(long = "auth-endpoint", value_name = "PLATFORM=URL")]
    pub auth_endpoints: Vec<String>,
    /// Region of phone numbers written without a country code (ISO 3166 code).
    #[arg(long, default_value = "CN")]
    pub phone_region: String,
    /// Seconds a query or aggregation may wait for each shard's answer before it fails with
    /// 503 (an unindexed scan of a large class takes seconds).
    #[arg(long, default_value_t = 30)]
    pub query_timeout_secs: u64,
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    install_metrics_recorder()?;
    let bootstrap_mode = match (&args.join, args.init) {
        (Some(addr), _) => Bootstrap::Join { addr: addr.clone() },
        (None, true) => Bootstrap::Init {
            shards: args.shards,
            replicas: args.replicas,
        },
        (None, false) => Bootstrap::Resume,
    };
    let opts = ClusterOptions {
        node_id: args.node_id,
        data_dir: args.data_dir.clone(),
        rpc_listen: args.rpc_addr,
        rpc_addr: args
            .rpc_advertise
            .clone()
            .unwrap_or_else(|| args.rpc_addr.to_string()),
        rpc_source_ip: args.rpc_source_ip,
        http_addr: args.http_addr.to_string(),
        bootstrap: bootstrap_mode,
        tuning: RaftTuning {
            heartbeat_ms: args.heartbeat_ms,
            election_min_ms: args.election_ms,
            election_max_ms: args.election_ms * 2,
            snapshot_logs: args.snapshot_logs,
            keep_logs: args.keep_logs,
        },
        ttl_sweep_every: Duration::from_secs(args.ttl_sweep_secs.max(1)),
        compact_every: Duration::from_secs(args.compact_secs.max(1)),
        query_timeout: Duration::from_secs(args.query_timeout_secs.max(1)),
    };
    crate::sms::phone::set_default_region(&args.phone_region)?;
    let cluster = Cluster::start(opts).await?;
    let listener = tokio::net::TcpListener::bind(args.http_addr).await?;
    tracing::info!(node = args.node_id, http = %args.http_addr, rpc = %args.rpc_addr, "node started");
    let state = AppState::new(
        cluster.clone(),
        HeaderNames::for_brand(&args.header_brand)?,
        args.max_body_bytes,
        Outside {
            mailer: mailer(&args)?,
            sms: sms_provider(&args)?,
            identity: IdentityProviders::new(&args.auth_endpoints)?,
        },
        args.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", args.http_addr)),
        crate::throttle::IpLimits {
            login: args.login_attempts_per_ip,
            sms: args.sms_requests_per_ip,
            mail: args.mail_requests_per_ip,
        },
    );
    if args.init {
        let (c, dir, http) = (
            cluster.clone(),
            args.data_dir.clone(),
            args.http_addr.to_string(),
        );
        tokio::spawn(async move {
            match bootstrap(&c, &dir, &http).await {
                Ok(doc) if std::env::var_os(crate::dev::DEV_CHILD_ENV).is_none() => {
                    println!("{}", describe(&doc))
                }
                Ok(_) => {}
                Err(e) => tracing::error!("{e}"),
            }
        });
    }
    let limits = crate::connections::ConnectionLimits {
        header_read: Duration::from_secs(args.http_header_timeout_secs.max(1)),
        idle: Duration::from_secs(args.http_idle_timeout_secs.max(1)),
        body_read: Duration::from_secs(args.http_body_timeout_secs.max(1)),
        max_connections: args.max_connections.max(1),
        max_per_ip: args.max_connections_per_ip.max(1),
    };
    crate::server::serve(listener, state, limits, shutdown_signal()).await?;
    cluster.shutdown().await;
    Ok(())
}

/// The mailer `--smtp-url` asks for, or the dev outbox.
fn mailer(args: &ServeArgs) -> anyhow::Result<std::sync::Arc<dyn crate::mail::Mailer>> {
    Ok(match &args.smtp_url {
        Some(url) => std::sync::Arc::new(crate::mail::SmtpMailer::new(url, &args.smtp_from)?),
        None => std::sync::Arc::new(crate::mail::OutboxMailer::new(args.data_dir.join("outbox"))),
    })
}

/// The SMS provider `--sms-webhook-url` asks for, or the dev outbox.
fn sms_provider(
    args: &ServeArgs,
) -> anyhow::Result<std::sync::Arc<dyn crate::sms::provider::SmsProvider>> {
    use crate::sms::provider::{OutboxProvider, WebhookProvider};
    Ok(match &args.sms_webhook_url {
        Some(url) => std::sync::Arc::new(WebhookProvider::new(url)?),
        None => std::sync::Arc::new(OutboxProvider::new(args.data_dir.join("sms-outbox"))),
    })
}
