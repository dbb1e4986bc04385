//! The `basalt` command: `serve` one node, `dev` a local cluster, `admin` a running cluster.

use basalt::cli::{Cli, Cmd};
use clap::Parser;

/// mimalloc instead of the system allocator: a query builds and drops many small JSON values
/// on several threads at once, where glibc's malloc spent a fifth of the CPU
/// (docs/decisions/0013).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // openraft warns of routine election traffic ("a message will be ignored because
        // Leader vote changed"): a healthy start stays quiet.
        tracing_subscriber::EnvFilter::new("info,openraft=error,h2=warn,tower=warn")
    });
    // yup-oauth2 logs the access tokens it gets at debug level: never written, whatever the
    // filter asks.
    if let Ok(quiet) = "yup_oauth2=warn".parse() {
        filter = filter.add_directive(quiet);
    }
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colours only on a terminal: log files get plain text, and no request pays
                // for styling.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        // Warn and error lines also go to the node's ring (`GET /admin/logs`).
        .with(basalt::request_log::LinesLayer)
        .init();
    if let Err(e) = basalt_cluster::failpoints::arm_from_env() {
        eprintln!("basalt: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Err(e) = basalt::config::apply(&args, basalt::cli::settable_options) {
        eprintln!("basalt: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    let cli = Cli::parse_from(args);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("basalt: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Cmd::Serve(args) => basalt::serve::run(*args).await,
            Cmd::Dev(args) => basalt::dev::run(*args).await,
            Cmd::Admin {
                rpc,
                certs_dir,
                command,
            } => basalt::admin::run(&rpc, certs_dir.as_deref(), command).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("basalt: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
