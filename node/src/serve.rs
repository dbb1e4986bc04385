//! `basalt serve`: one node — the cluster part and the HTTP API — until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use basalt_cluster::files::bucket::BucketOptions;
use basalt_cluster::ids::NodeId;

use basalt_cluster::{Bootstrap, Cluster, ClusterOptions, RaftTuning, StoreTuning};

use crate::api::context::{AppState, Guards, HeaderNames, Outside};
use crate::api::ops::install_metrics_recorder;
use crate::bootstrap::{bootstrap, describe};
use crate::users::third_party::providers::IdentityProviders;

/// Set in the environment of nodes started by `basalt dev` (the parent prints for them).
pub const DEV_CHILD_ENV: &str = "BASALT_DEV_CHILD";

/// Options of one node (`basalt serve`): where it is and which cluster it belongs to. Every
/// option can also come from the environment (`BASALT_<NAME>`) or a config file
/// (`--config`, see `config`).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// This node's id (a positive integer, unique in the cluster).
    #[arg(long, env = "BASALT_NODE_ID")]
    pub node_id: u64,
    /// Directory for this node's data.
    #[arg(long, default_value = "./data", env = "BASALT_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Address the REST API listens on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "BASALT_HTTP_ADDR")]
    pub http_addr: SocketAddr,
    /// Address the node-to-node gRPC service listens on.
    #[arg(long, default_value = "127.0.0.1:9080", env = "BASALT_RPC_ADDR")]
    pub rpc_addr: SocketAddr,
    /// The gRPC address peers should dial (default: --rpc-addr); for proxies and NAT.
    #[arg(long, env = "BASALT_RPC_ADVERTISE")]
    pub rpc_advertise: Option<String>,
    /// Local IP outgoing peer connections are made from (default: the system's choice).
    #[arg(long, env = "BASALT_RPC_SOURCE_IP")]
    pub rpc_source_ip: Option<std::net::IpAddr>,
    /// Create a new cluster with this node as its first member.
    #[arg(long, conflicts_with = "join", env = "BASALT_INIT")]
    pub init: bool,
    /// Join the cluster of the node at this gRPC address.
    #[arg(long, env = "BASALT_JOIN")]
    pub join: Option<String>,
    /// Data shards of a new cluster (fixed at --init).
    #[arg(long, default_value_t = 16, env = "BASALT_SHARDS",
          value_parser = clap::value_parser!(u32).range(1..=basalt_cluster::settings::MAX_SHARDS as i64))]
    pub shards: u32,
    /// Replicas per group of a new cluster (capped by the number of nodes).
    #[arg(long, default_value_t = 3, env = "BASALT_REPLICAS")]
    pub replicas: u32,
    /// Log indexes of object changes each group of a new cluster keeps for realtime
    /// subscribers that reconnect (fixed at --init).
    #[arg(long, default_value_t = basalt_cluster::changes::KEPT_ENTRIES, env = "BASALT_CHANGE_LOG_ENTRIES")]
    pub change_log_entries: u64,
    /// MiB of RocksDB block cache (default: an eighth of the machine's memory, 64 MiB to 8 GiB).
    #[arg(long, env = "BASALT_BLOCK_CACHE_MB")]
    pub block_cache_mb: Option<usize>,
    /// This node's certificates directory for mutual TLS with its peers: `ca.pem` (the CAs
    /// whose certificates are accepted), `node.pem` and `node.key` (`basalt admin certs
    /// create-node`). Without it the peer port is plaintext, which only a loopback
    /// `--rpc-addr` or `--insecure` allows.
    #[arg(long, env = "BASALT_CERTS_DIR")]
    pub certs_dir: Option<PathBuf>,
    /// The key app keys and platform credentials are sealed under before they are stored (64
    /// hexadecimal characters; made at `--init`, fetched from a peer by a node that joins or
    /// has none). Keep it off the data disk (a secrets mount) so that a copy of the disk,
    /// a snapshot or a backup gives no working key. Default: `<data-dir>/secrets.key`.
    #[arg(long, env = "BASALT_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Let the peer port listen in plaintext on a non-loopback address: anyone who reaches it
    /// can read and write every app's data. Every node's `/health` then says the cluster is
    /// insecure.
    #[arg(long, env = "BASALT_INSECURE")]
    pub insecure: bool,
    /// Seconds a node asked to stop (SIGTERM, Ctrl-C, `basalt admin drain`) keeps serving
    /// while `/health?ready=1` answers 503, so that proxies take it out, before it hands its
    /// leaderships over and stops (a second signal skips the rest).
    #[arg(long, default_value_t = 5, env = "BASALT_DRAIN_WAIT")]
    pub drain_wait: u64,
    /// Also serve `/metrics` (without a token) on this address, e.g. a private interface
    /// Prometheus scrapes.
    #[arg(long, env = "BASALT_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// Options every node of a cluster shares: what `basalt dev` passes to all its nodes.
/// Serialized (kebab-case names) to build the nodes' command lines.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServiceArgs {
    /// Brand word of the header names (`X-<brand>-Application-Id`).
    #[arg(long, default_value = "Service", env = "BASALT_HEADER_BRAND")]
    pub header_brand: String,
    /// Largest JSON request body, in bytes.
    #[arg(long, default_value_t = 16 << 20, env = "BASALT_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// SMTP relay for mails (`smtp://host:port`); without one, mails go to
    /// `<data-dir>/outbox/` and the log.
    #[arg(long, env = "BASALT_SMTP_URL")]
    pub smtp_url: Option<String>,
    /// Sender address of mails.
    #[arg(
        long,
        default_value = "Basalt <noreply@basalt.local>",
        env = "BASALT_SMTP_FROM"
    )]
    pub smtp_from: String,
    /// URL that receives each SMS as a JSON POST (the operator's gateway); without one, SMS
    /// go to `<data-dir>/sms-outbox/` and the log.
    #[arg(long, env = "BASALT_SMS_WEBHOOK_URL")]
    pub sms_webhook_url: Option<String>,
    /// Base URL of links in mails, captcha pictures and stored files (default:
    /// `http://<http-addr>`, `https://` with `--tls-cert`).
    #[arg(long, env = "BASALT_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// PEM certificate chain to serve the API over HTTPS with (HTTP/2 by ALPN); SIGHUP reads
    /// it again.
    #[arg(long, requires = "tls_key", env = "BASALT_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert", env = "BASALT_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Bearer token `/metrics` asks of callers (`Authorization: Bearer <token>`); without
    /// one, only callers on the node's own machine (loopback) are answered.
    #[arg(long, env = "BASALT_METRICS_TOKEN", hide_env_values = true)]
    #[serde(skip)]
    pub metrics_token: Option<String>,
    /// Label metrics of cloud functions with their app and function (exposes app ids and
    /// function names to whoever reads `/metrics`).
    #[arg(long, env = "BASALT_METRICS_PER_APP")]
    pub metrics_per_app: bool,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 250, env = "BASALT_HEARTBEAT_MS")]
    pub heartbeat_ms: u64,
    /// Smallest Raft election timeout in milliseconds (the largest is twice this).
    #[arg(long, default_value_t = 1200, env = "BASALT_ELECTION_MS")]
    pub election_ms: u64,
    /// Confirm every read with a quorum round (read index) instead of the leader's lease.
    #[arg(long, env = "BASALT_NO_LEASE_READS")]
    pub no_lease_reads: bool,
    /// How long each data shard a node leads takes the node's new objects before the next
    /// one does, so that creates arriving together share Raft rounds; 0 puts each new
    /// object on a led shard drawn at random.
    #[arg(long, default_value_t = basalt_cluster::CREATE_LANE_MS, env = "BASALT_CREATE_LANE_MS")]
    pub create_lane_ms: u64,
    /// How many batches of writes each Raft group's leader has in flight at once; writes
    /// that arrive meanwhile wait and are appended together. 0 appends each write alone.
    #[arg(long, default_value_t = basalt_cluster::PROPOSALS_IN_FLIGHT, env = "BASALT_PROPOSALS_IN_FLIGHT")]
    pub proposals_in_flight: usize,
    /// After a Raft group's leader answers a batch of writes, the longest it waits, in
    /// microseconds (rounded up to whole milliseconds), for the callers it answered to queue
    /// again beside those already waiting before it appends the next batch (at most a quarter
    /// of the last batch's round trip). 0 appends what waits at once.
    #[arg(long, default_value_t = basalt_cluster::PROPOSAL_GATHER_US, env = "BASALT_PROPOSAL_GATHER_US")]
    pub proposal_gather_us: u64,
    /// Entries applied since the last snapshot that trigger a new one.
    #[arg(long, default_value_t = 20_000, env = "BASALT_SNAPSHOT_LOGS")]
    pub snapshot_logs: u64,
    /// Entries kept in the log behind a snapshot.
    #[arg(long, default_value_t = 1_000, env = "BASALT_KEEP_LOGS")]
    pub keep_logs: u64,
    /// Seconds between sweeps of expired records.
    #[arg(long, default_value_t = 5, env = "BASALT_TTL_SWEEP_SECS")]
    pub ttl_sweep_secs: u64,
    /// Seconds between snapshot/compaction rounds.
    #[arg(long, default_value_t = 600, env = "BASALT_COMPACT_SECS")]
    pub compact_secs: u64,
    /// Seconds between consistency checks of every group's replicas, run by the scheduler
    /// (each hashes every replica's state once: a read of the whole store); 0: never.
    #[arg(long, default_value_t = 21_600, env = "BASALT_CHECK_SECS")]
    pub check_secs: u64,
    /// Where scheduled backups and the console's (`POST /admin/backups`) go: an absolute
    /// directory, the same on every node's machine, or s3://bucket/prefix (docs/ops/backup.md);
    /// none: no scheduled backups.
    #[arg(long, env = "BASALT_BACKUP_TO")]
    pub backup_to: Option<String>,
    /// When scheduled backups run: cron, UTC (5 fields, or 6 with seconds first; `@daily`).
    #[arg(long, default_value = "0 3 * * *", env = "BASALT_BACKUP_SCHEDULE")]
    pub backup_schedule: String,
    /// Scheduled backups kept in --backup-to (older ones are removed after each new one).
    #[arg(long, default_value_t = 7, env = "BASALT_BACKUP_KEEP")]
    pub backup_keep: usize,
    /// MB per second each node may write during a scheduled backup (default: no limit).
    #[arg(long, env = "BASALT_BACKUP_RATE")]
    pub backup_rate: Option<f64>,
    /// Requests this node keeps for `GET /admin/logs` (warn and error lines: a tenth as many,
    /// at least 100); 0: none.
    #[arg(long, default_value_t = 10_000, env = "BASALT_REQUEST_LOG_ENTRIES")]
    pub request_log_entries: usize,
    /// Also write every request to stdout as one JSON line (for log shippers).
    #[arg(long, env = "BASALT_REQUEST_LOG_JSON")]
    pub request_log_json: bool,
    /// Seconds a client has to send a request's head before its connection is closed.
    #[arg(long, default_value_t = 10, env = "BASALT_HTTP_HEADER_TIMEOUT_SECS")]
    pub http_header_timeout_secs: u64,
    /// Seconds a keep-alive connection may stay idle between requests.
    #[arg(long, default_value_t = 30, env = "BASALT_HTTP_IDLE_TIMEOUT_SECS")]
    pub http_idle_timeout_secs: u64,
    /// Seconds a client has to send a request's whole body (408 after).
    #[arg(long, default_value_t = 60, env = "BASALT_HTTP_BODY_TIMEOUT_SECS")]
    pub http_body_timeout_secs: u64,
    /// Open HTTP connections per node; more are closed at once.
    #[arg(long, default_value_t = 4096, env = "BASALT_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// Open HTTP connections per client IP address; more are closed at once.
    #[arg(long, default_value_t = 256, env = "BASALT_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: usize,
    /// Memory the request bodies a node reads and handles at once may take, in MiB (each
    /// counts four times its size); past it a request waits up to 5 s, then answers 503.
    #[arg(long, default_value_t = 1024, env = "BASALT_REQUEST_MEMORY_MB")]
    pub request_memory_mb: usize,
    /// Failed logins (users and console) per client IP per minute on this node; 0: no limit.
    #[arg(long, default_value_t = 30, env = "BASALT_LOGIN_ATTEMPTS_PER_IP")]
    pub login_attempts_per_ip: u32,
    /// `requestSmsCode` calls per client IP per minute on this node; 0: no limit.
    #[arg(long, default_value_t = 5, env = "BASALT_SMS_REQUESTS_PER_IP")]
    pub sms_requests_per_ip: u32,
    /// Mail requests (password reset, email verification) per client IP per minute on this
    /// node; 0: no limit.
    #[arg(long, default_value_t = 10, env = "BASALT_MAIL_REQUESTS_PER_IP")]
    pub mail_requests_per_ip: u32,
    /// Base URL of a platform's service for verifying `authData` (`PLATFORM=URL`, repeatable;
    /// default: the platform's own, e.g. `weapp=https://api.weixin.qq.com`).
    #[arg(
        long = "auth-endpoint",
        value_name = "PLATFORM=URL",
        env = "BASALT_AUTH_ENDPOINT",
        value_delimiter = ','
    )]
    #[serde(rename = "auth-endpoint")]
    pub auth_endpoints: Vec<String>,
    /// Base URL of a push service (`NAME=URL`, repeatable; NAME one of apns, fcm, wns;
    /// default: the service's own), for a proxy or a test's fake.
    #[arg(
        long = "push-endpoint",
        value_name = "NAME=URL",
        env = "BASALT_PUSH_ENDPOINT",
        value_delimiter = ','
    )]
    #[serde(rename = "push-endpoint")]
    pub push_endpoints: Vec<String>,
    /// A PEM file of certificates to trust, besides the system's, when pushing (a proxy's or
    /// a test's certificate authority).
    #[arg(long, env = "BASALT_PUSH_CA_FILE")]
    pub push_ca_file: Option<PathBuf>,
    /// Region of phone numbers written without a country code (ISO 3166 code).
    #[arg(long, default_value = "CN", env = "BASALT_PHONE_REGION")]
    pub phone_region: String,
    /// Seconds a query or aggregation may wait for each shard's answer before it fails with
    /// 503 (an unindexed scan of a large class takes seconds).
    #[arg(long, default_value_t = 30, env = "BASALT_QUERY_TIMEOUT_SECS")]
    pub query_timeout_secs: u64,
    /// Queries (listings, counts, aggregations) one node runs at once; one more answers 503
    /// with `Retry-After` instead of waiting behind them.
    #[arg(long, default_value_t = 256, env = "BASALT_MAX_QUERIES_IN_FLIGHT")]
    pub max_queries_in_flight: usize,
    /// Threads that read for listings, counts and aggregations at once (0: one per core);
    /// the other admitted queries wait for one, so that scans never outnumber the threads
    /// that carry Raft heartbeats.
    #[arg(long, default_value_t = 0, env = "BASALT_BULK_READ_THREADS")]
    pub bulk_read_threads: usize,
    /// Cloud function invocations one node runs at once, each on its own thread (0: four per
    /// core); one more waits for a slot up to its wall time, then answers 503.
    #[arg(long, default_value_t = 0, env = "BASALT_FUNCTION_THREADS")]
    pub function_threads: usize,
    /// Name of the file storage: answered as `cdn` and the first part of files' url paths.
    /// Keep it when changing `--files-backend`: earlier files' urls name it.
    #[arg(long, default_value = "basalt", value_parser = parse_cdn_name, env = "BASALT_FILES_CDN")]
    pub files_cdn: String,
    /// Where files' bytes are kept: `cluster` (whole copies on the nodes) or
    /// `s3://<bucket>[/<prefix>]` (an S3-compatible bucket, reached with the --s3-* options;
    /// what they leave out is read from the AWS_* environment variables). Every node of a
    /// cluster gives the same.
    #[arg(long, default_value = "cluster", value_parser = parse_files_backend, env = "BASALT_FILES_BACKEND")]
    pub files_backend: String,
    /// The S3-compatible service's address (`http://127.0.0.1:9000`); AWS when not given.
    #[arg(long, env = "BASALT_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// The bucket's region.
    #[arg(long, env = "BASALT_S3_REGION")]
    pub s3_region: Option<String>,
    #[arg(long, env = "BASALT_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// (`basalt dev` hands it to its nodes in their environment, not on their command lines.)
    #[arg(long, env = "BASALT_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    #[serde(skip)]
    pub s3_secret_access_key: Option<String>,
    /// Address the bucket as `<bucket>.<endpoint host>` instead of `<endpoint>/<bucket>`.
    #[arg(long, env = "BASALT_S3_VIRTUAL_HOSTED")]
    pub s3_virtual_hosted: bool,
    /// Base URL of stored files' urls when they are served from an origin of their own (a
    /// host name of their own pointing at the nodes, e.g. `https://files.example.com`, as
    /// Google serves user content from googleusercontent.com): requests to that host get
    /// HTML, SVG and other active types inline; on any other host they are downloads in a
    /// sandbox. Default: `--public-url`.
    #[arg(long, env = "BASALT_FILES_PUBLIC_URL")]
    pub files_public_url: Option<String>,
    /// Largest uploaded file, in MiB (larger answers 1500).
    #[arg(long, default_value_t = 100, env = "BASALT_MAX_FILE_MB")]
    pub max_file_mb: u64,
    /// Slowest average an upload may keep, in KiB/s, after its first
    /// `--http-body-timeout-secs` (408 after).
    #[arg(long, default_value_t = 16, env = "BASALT_UPLOAD_MIN_KIB_PER_SEC")]
    pub upload_min_kib_per_sec: u64,
    /// Percent of the data disk free under which the node raises a disk alarm and gets no new
    /// replicas.
    #[arg(long, default_value_t = 10.0, env = "BASALT_DISK_LOW")]
    pub disk_low: f64,
    /// Percent of the data disk free under which writes that add data to the groups this node
    /// holds are refused (507, 10081).
    #[arg(long, default_value_t = 2.0, env = "BASALT_DISK_CRITICAL")]
    pub disk_critical: f64,
    /// Bytes free under which the disk is critical too, whatever its size: the room the store
    /// may need at once to flush its memtables and compact (0: only the percent).
    #[arg(long, default_value_t = 256 << 20, env = "BASALT_DISK_CRITICAL_BYTES")]
    pub disk_critical_bytes: u64,
    /// Bytes of the disk ballast kept beside the store (default: 1 GiB or 1 % of the disk,
    /// whichever is less; 0: none).
    #[arg(long, env = "BASALT_BALLAST_BYTES")]
    pub ballast_bytes: Option<u64>,
    /// Seconds between rounds of file upkeep (copies re-replicated and reclaimed).
    #[arg(long, default_value_t = 300, env = "BASALT_FILES_UPKEEP_SECS")]
    pub files_upkeep_secs: u64,
    /// Seconds before a copy of a file without a record (a failed upload) is reclaimed (at
    /// least 120: an upload's record may follow its first copy by that long).
    #[arg(long, default_value_t = 3600, env = "BASALT_FILES_ORPHAN_GRACE_SECS")]
    pub files_orphan_grace_secs: u64,
    /// The ffmpeg program that extracts video snapshots (a name looked up in PATH, or a path).
    #[arg(long, default_value = "ffmpeg", env = "BASALT_FFMPEG")]
    pub ffmpeg: String,
}

/// A storage name: 1 to 32 lowercase letters, digits, `-` or `_`, starting with a letter (so
/// files' urls never look like the API's own paths).
fn parse_cdn_name(name: &str) -> Result<String, String> {
    let ok = (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !["captcha", "email", "health", "metrics"].contains(&name);
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{name:?}: 1 to 32 lowercase letters, digits, - or _, starting with a letter, not a path the API uses"
        ))
    }
}

/// `cluster`, or an `s3://` url `bucket::parse_url` takes.
fn parse_files_backend(backend: &str) -> Result<String, String> {
    if backend == "cluster" {
        return Ok(backend.to_string());
    }
    basalt_cluster::files::bucket::parse_url(backend)
        .map(|_| backend.to_string())
        .map_err(|e| e.to_string())
}

impl ServiceArgs {
    /// The bucket files go to, when `--files-backend` names one.
    pub fn files_bucket(&self) -> Option<BucketOptions> {
        (self.files_backend != "cluster").then(|| BucketOptions {
            url: self.files_backend.clone(),
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            access_key_id: self.s3_access_key_id.clone(),
            secret_access_key: self.s3_secret_access_key.clone(),
            virtual_hosted: self.s3_virtual_hosted,
        })
    }

    /// The options as `basalt serve` command-line arguments (every option, defaults included).
    pub fn to_args(&self) -> anyhow::Result<Vec<String>> {
        use serde_json::Value;
        let Value::Object(options) = serde_json::to_value(self)? else {
            anyhow::bail!("service options are not a map");
        };
        let mut out = Vec::new();
        for (name, value) in options {
            let values = match value {
                Value::Null | Value::Bool(false) => continue,
                Value::Bool(true) => {
                    out.push(format!("--{name}"));
                    continue;
                }
                Value::Array(items) => items,
                other => vec![other],
            };
            for v in values {
                out.push(format!("--{name}"));
                out.push(match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                });
            }
        }
        Ok(out)
    }
}

/// Most requests `--request-log-entries` may keep (about 50 MiB at most).
const MAX_REQUEST_LOG_ENTRIES: usize = 200_000;

/// The backup schedule the options ask for, checked before the node starts.
fn backup_schedule(args: &ServeArgs) -> anyhow::Result<Option<crate::backups::BackupSchedule>> {
    let Some(dest) = &args.service.backup_to else {
        return Ok(None);
    };
    let relative = !dest.starts_with("s3://") && !std::path::Path::new(dest).is_absolute();
    if relative {
        anyhow::bail!("--backup-to {dest:?}: give an absolute directory or s3://bucket/prefix");
    }
    let cron = crate::functions::cron::parse(&args.service.backup_schedule)
        .map_err(|e| anyhow::anyhow!("--backup-schedule: {e}"))?;
    let rate = match args.service.backup_rate {
        Some(mb) if !(mb > 0.0 && mb.is_finite()) => {
            anyhow::bail!("--backup-rate is MB per second, above 0")
        }
        Some(mb) => Some((mb * 1_000_000.0) as u64),
        None => None,
    };
    Ok(Some(crate::backups::BackupSchedule {
        dest: dest.clone(),
        cron,
        keep: args.service.backup_keep.max(1),
        rate,
    }))
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    install_metrics_recorder()?;
    crate::request_log::install(
        args.service
            .request_log_entries
            .min(MAX_REQUEST_LOG_ENTRIES),
        args.service.request_log_json,
    );
    let backup_schedule = backup_schedule(&args)?;
    // From the start, so that a SIGHUP sent while the node is still joining does not end it.
    #[cfg(unix)]
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    #[cfg(not(unix))]
    let hangups = None::<()>;
    let bootstrap_mode = match (&args.join, args.init) {
        (Some(addr), _) => Bootstrap::Join { addr: addr.clone() },
        (None, true) => Bootstrap::Init {
            shards: args.shards,
            replicas: args.replicas,
            changes_kept: args.change_log_entries,
        },
        (None, false) => Bootstrap::Resume,
    };
    let opts = ClusterOptions {
        node_id: NodeId::new(args.node_id),
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
            heartbeat_ms: args.service.heartbeat_ms,
            election_min_ms: args.service.election_ms,
            election_max_ms: args.service.election_ms * 2,
            lease_reads: !args.service.no_lease_reads,
            create_lane_ms: args.service.create_lane_ms,
            proposals_in_flight: args.service.proposals_in_flight,
            proposal_gather_us: args.service.proposal_gather_us,
            snapshot_logs: args.service.snapshot_logs,
            keep_logs: args.service.keep_logs,
        },
        ttl_sweep_every: Duration::from_secs(args.service.ttl_sweep_secs.max(1)),
        compact_every: Duration::from_secs(args.service.compact_secs.max(1)),
        check_every: (args.service.check_secs > 0)
            .then(|| Duration::from_secs(args.service.check_secs)),
        query_timeout: Duration::from_secs(args.service.query_timeout_secs.max(1)),
        max_queries_in_flight: args.service.max_queries_in_flight,
        bulk_read_threads: args.service.bulk_read_threads,
        store: match args.block_cache_mb {
            Some(mb) => StoreTuning::with_cache(mb.max(1).saturating_mul(1 << 20)),
            None => StoreTuning::default(),
        },
        file_upkeep: basalt_cluster::services::files::upkeep::UpkeepTimes {
            every: Duration::from_secs(args.service.files_upkeep_secs.max(1)),
            orphan_grace: Duration::from_secs(args.service.files_orphan_grace_secs),
        },
        files_bucket: args.service.files_bucket(),
        peer_tls: peer_tls(&args)?,
        features: vec![crate::secrets::SEALING_FEATURE.to_string()],
        disk: basalt_cluster::disk::DiskLimits {
            low_percent: args.service.disk_low,
            critical_percent: args.service.disk_critical,
            critical_bytes: args.service.disk_critical_bytes,
            ballast_bytes: args.service.ballast_bytes,
        },
    };
    crate::sms::phone::set_default_region(&args.service.phone_region)?;
    crate::functions::set_per_app_metrics(args.service.metrics_per_app);
    let https = match (&args.service.tls_cert, &args.service.tls_key) {
        (Some(cert), Some(key)) => Some(std::sync::Arc::new(
            crate::https::ServingTls::load(cert.clone(), key.clone())
                .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e}"))?,
        )),
        _ => None,
    };
    // Every port is bound before the data dir is written (the peer port in `Cluster::start`):
    // one already taken fails the start, naming it, with nothing half made.
    let listener = bind(args.http_addr, "--http-addr").await?;
    let metrics_listener = match args.metrics_addr {
        Some(addr) => Some(bind(addr, "--metrics-addr").await?),
        None => None,
    };
    let cluster = Cluster::start(opts).await?;
    tokio::spawn(reload_on_hangup(hangups, cluster.clone(), https.clone()));
    tokio::spawn(warn_of_plaintext_members(cluster.clone()));
    let secrets_key = args
        .secrets_key_file
        .clone()
        .unwrap_or_else(|| args.data_dir.join("secrets.key"));
    tokio::spawn(crate::apps::seal_stored_apps_once_sealing(cluster.clone()));
    crate::secrets::node_key::install(
        &cluster,
        &secrets_key,
        &args.data_dir,
        args.init,
        args.join.as_deref(),
    )
    .await?;
    let push_providers = crate::push::provider::Providers::new(
        &args.service.push_endpoints,
        args.service.push_ca_file.as_deref(),
    )?;
    tokio::spawn(crate::push::dispatcher::run(
        cluster.clone(),
        push_providers,
    ));
    tracing::info!(node = args.node_id, http = %args.http_addr, rpc = %args.rpc_addr, "node started");
    let state = AppState::new(
        cluster.clone(),
        HeaderNames::for_brand(&args.service.header_brand)?,
        args.service.max_body_bytes,
        Outside {
            mailer: mailer(&args)?,
            sms: sms_provider(&args)?,
            identity: IdentityProviders::new(&args.service.auth_endpoints)?,
            functions: crate::functions::runner::Runner::new(function_threads(
                args.service.function_threads,
            ))?,
            backups: backup_schedule.clone(),
        },
        args.service.public_url.clone().unwrap_or_else(|| {
            let scheme = if https.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", args.http_addr)
        }),
        crate::files::FilesConfig {
            cdn: args.service.files_cdn.clone(),
            max_bytes: args.service.max_file_mb.saturating_mul(1 << 20),
            idle: Duration::from_secs(args.service.http_body_timeout_secs.max(1)),
            min_rate: args
                .service
                .upload_min_kib_per_sec
                .max(1)
                .saturating_mul(1024),
            ffmpeg: args.service.ffmpeg.clone(),
            origin: args.service.files_public_url.clone(),
        },
        Guards {
            ip_limits: crate::throttle::IpLimits {
                login: args.service.login_attempts_per_ip,
                sms: args.service.sms_requests_per_ip,
                mail: args.service.mail_requests_per_ip,
            },
            metrics_token: args.service.metrics_token.clone(),
            body_memory: args
                .service
                .request_memory_mb
                .max(1)
                .saturating_mul(1 << 20),
        },
    );
    if let Some(listener) = metrics_listener {
        tokio::spawn(serve_metrics(listener, state.clone()));
    }
    tokio::spawn(crate::functions::cron::run(
        cluster.clone(),
        state.functions.scheduled(),
    ));
    if let Some(schedule) = backup_schedule {
        tokio::spawn(crate::backups::run(cluster.clone(), schedule));
    }
    if args.init {
        let scheme = if args.service.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        let (c, dir, http) = (
            cluster.clone(),
            args.data_dir.clone(),
            format!("{scheme}://{}", args.http_addr),
        );
        tokio::spawn(async move {
            match bootstrap(&c, &dir, &http).await {
                Ok(doc) if std::env::var_os(DEV_CHILD_ENV).is_none() => {
                    println!("{}", describe(&doc))
                }
                Ok(_) => {}
                Err(e) => tracing::error!("{e}"),
            }
        });
    }
    let limits = crate::connections::ConnectionLimits {
        header_read: Duration::from_secs(args.service.http_header_timeout_secs.max(1)),
        idle: Duration::from_secs(args.service.http_idle_timeout_secs.max(1)),
        body_read: Duration::from_secs(args.service.http_body_timeout_secs.max(1)),
        max_connections: args.service.max_connections.max(1),
        max_per_ip: args.service.max_connections_per_ip.max(1),
    };
    let drain_state = state.drain.clone();
    let drain = crate::drain::run(
        cluster.clone(),
        drain_state.clone(),
        Duration::from_secs(args.drain_wait),
    );
    crate::server::serve(listener, state, limits, https, drain).await?;
    // Realtime sockets outlive their HTTP connections: they send their reconnect hints first.
    drain_state
        .sockets_closed(crate::drain::SOCKETS_WITHIN)
        .await;
    cluster.shutdown().await;
    Ok(())
}

/// Listens on `addr`, or says which address (and option) could not be had.
async fn bind(addr: SocketAddr, option: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} ({option}): {e}"))
}

/// The mutual TLS of this node's peer port from `--certs-dir`; without it, plaintext — which a
/// node refuses on a non-loopback address unless `--insecure` (decisions/0031).
fn peer_tls(
    args: &ServeArgs,
) -> anyhow::Result<Option<std::sync::Arc<basalt_cluster::tls::PeerTls>>> {
    if let Some(dir) = &args.certs_dir {
        let tls = crate::certs::node_tls(dir, NodeId::new(args.node_id))?;
        tracing::info!(certs = %dir.display(), "peer links use mutual TLS");
        return Ok(Some(tls));
    }
    let advertised_loopback = match &args.rpc_advertise {
        None => true,
        Some(a) => a
            .parse::<SocketAddr>()
            .map(|a| a.ip().is_loopback())
            .unwrap_or_else(|_| a.starts_with("localhost:")),
    };
    let loopback = args.rpc_addr.ip().is_loopback() && advertised_loopback;
    if !loopback && !args.insecure {
        anyhow::bail!(
            "refusing to serve the peer port on {} without TLS: anyone reaching it could read and \
             write every app's data. Give --certs-dir (made by `basalt admin certs create-node`), \
             or --insecure to accept that",
            args.rpc_addr
        );
    }
    tracing::warn!(
        rpc = %args.rpc_addr,
        "peer links are plaintext (no --certs-dir): any process that reaches the peer port can \
         read and write every app's data; the cluster reports itself insecure"
    );
    Ok(None)
}

/// Reads the certificates again on every SIGHUP (peer TLS and HTTPS); one that fails to load
/// keeps what is in use, and says why in the log.
#[cfg(unix)]
async fn reload_on_hangup(
    hangups: Option<tokio::signal::unix::Signal>,
    cluster: Cluster,
    https: Option<std::sync::Arc<crate::https::ServingTls>>,
) {
    {
        let Some(mut hangups) = hangups else {
            tracing::warn!("cannot listen for SIGHUP: certificates are read at start only");
            return;
        };
        while hangups.recv().await.is_some() {
            if let Some(tls) = cluster.peer_tls() {
                match tls.reload() {
                    Ok(()) => tracing::info!("SIGHUP: peer certificates reloaded"),
                    Err(e) => {
                        tracing::error!("SIGHUP: peer certificates kept, the new ones fail: {e}")
                    }
                }
            }
            if let Some(tls) = &https {
                match tls.reload() {
                    Ok(()) => tracing::info!("SIGHUP: HTTPS certificate reloaded"),
                    Err(e) => {
                        tracing::error!("SIGHUP: HTTPS certificate kept, the new one fails: {e}")
                    }
                }
            }
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_hangup(
    _hangups: Option<()>,
    _cluster: Cluster,
    _https: Option<std::sync::Arc<crate::https::ServingTls>>,
) {
}

/// Says in this node's log which members' peer links are plaintext, when that set changes
/// (every node does: the whole cluster is insecure while one member is).
async fn warn_of_plaintext_members(cluster: Cluster) {
    let mut said: Vec<u64> = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let plaintext: Vec<u64> = cluster
            .local_nodes()
            .into_iter()
            .filter(|n| n.plaintext && n.state == basalt_cluster::admin::NodeState::Active)
            .map(|n| n.id.get())
            .collect();
        if plaintext != said {
            if !plaintext.is_empty() {
                tracing::warn!(
                    members = ?plaintext,
                    "the cluster is insecure: these members' peer links are plaintext"
                );
            }
            said = plaintext;
        }
    }
}

/// `/metrics` alone, without a token, on `--metrics-addr` (at most 16 connections).
async fn serve_metrics(listener: tokio::net::TcpListener, state: AppState) {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(crate::api::ops::metrics))
        .with_state(state);
    let limits = crate::connections::ConnectionLimits {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(30),
        body_read: Duration::from_secs(10),
        max_connections: 16,
        max_per_ip: 16,
    };
    let service = tower::service_fn(move |req: axum::extract::Request| {
        tower::ServiceExt::oneshot(app.clone(), req)
    });
    let never = std::future::pending::<()>();
    if let Err(e) = crate::connections::serve(listener, service, limits, None, never).await {
        tracing::error!("metrics listener stopped: {e}");
    }
}

/// `--function-threads`, with 0 for four per core.
fn function_threads(asked: usize) -> usize {
    match asked {
        0 => 4 * std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// The mailer `--smtp-url` asks for, or the dev outbox.
fn mailer(args: &ServeArgs) -> anyhow::Result<std::sync::Arc<dyn crate::mail::Mailer>> {
    Ok(match &args.service.smtp_url {
        Some(url) => {
            std::sync::Arc::new(crate::mail::SmtpMailer::new(url, &args.service.smtp_from)?)
        }
        None => std::sync::Arc::new(crate::mail::OutboxMailer::new(args.data_dir.join("outbox"))),
    })
}

/// The SMS provider `--sms-webhook-url` asks for, or the dev outbox.
fn sms_provider(
    args: &ServeArgs,
) -> anyhow::Result<std::sync::Arc<dyn crate::sms::provider::SmsProvider>> {
    use crate::sms::provider::{OutboxProvider, WebhookProvider};
    Ok(match &args.service.sms_webhook_url {
        Some(url) => std::sync::Arc::new(WebhookProvider::new(url)?),
        None => std::sync::Arc::new(OutboxProvider::new(args.data_dir.join("sms-outbox"))),
    })
}
