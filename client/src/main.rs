//! `basalt-cli`: call Basalt's REST API from the shell.
//!
//! Keys come from `--credentials <file>` (the `credentials.json` a node writes at `--init`) or
//! from `--app-id`/`--rest-key` (and `--master-key` for what needs it). `functions deploy <dir>`
//! deploys a folder of cloud functions (`functions_dir`).

mod functions_dir;

use basalt_client::{AppKeys, Client};
use clap::{Parser, Subcommand};
use serde_json::Value;

#[derive(Parser)]
#[command(name = "basalt-cli", about = "Call Basalt's REST API")]
struct Cli {
    /// Base URL of any node.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// A credentials.json written by `basalt serve --init`.
    #[arg(long)]
    credentials: Option<std::path::PathBuf>,
    #[arg(long)]
    app_id: Option<String>,
    #[arg(long)]
    rest_key: Option<String>,
    /// The app's master key (deploying functions needs it; a credentials file has it).
    #[arg(long)]
    master_key: Option<String>,
    /// A PEM file of CA certificates to trust besides the system's (a server on HTTPS with a
    /// private CA's certificate).
    #[arg(long)]
    ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create an object: `create GameScore '{"score":1}'`.
    Create { class: String, json: String },
    /// Read an object.
    Get { class: String, id: String },
    /// Update an object: `update GameScore ID '{"score":{"__op":"Increment","amount":1}}'`.
    Update {
        class: String,
        id: String,
        json: String,
    },
    /// Delete an object.
    Delete { class: String, id: String },
    /// List a class: `list GameScore --param limit=5 --param order=-score`.
    List {
        class: String,
        #[arg(long = "param")]
        params: Vec<String>,
    },
    /// Cloud functions: deploy a folder, list, call, delete.
    #[command(subcommand)]
    Functions(FunctionsCmd),
}

#[derive(Subcommand)]
enum FunctionsCmd {
    /// Deploy every `<name>.js` of a folder as the function `<name>` (a first comment line
    /// `// @trigger beforeSave GameScore` or `// @cron 0 3 * * *` makes it a trigger or a
    /// scheduled function); `--prune` also deletes the app's functions the folder lacks.
    Deploy {
        dir: std::path::PathBuf,
        #[arg(long)]
        prune: bool,
    },
    /// List the app's functions.
    List,
    /// Call a function: `functions call add '{"a":1,"b":2}'`.
    Call {
        name: String,
        #[arg(default_value = "{}")]
        json: String,
    },
    /// Delete a function.
    Delete { name: String },
}

fn keys(cli: &Cli) -> anyhow::Result<Option<AppKeys>> {
    if let Some(path) = &cli.credentials {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        return Ok(Some(serde_json::from_value(doc["app"].clone())?));
    }
    Ok(match (&cli.app_id, &cli.rest_key) {
        (Some(a), Some(r)) => Some(AppKeys {
            application_id: a.clone(),
            rest_key: r.clone(),
            master_key: cli.master_key.clone(),
        }),
        _ => None,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut client = Client::new(&cli.url, keys(&cli)?)?;
    if let Some(ca) = &cli.ca_file {
        client = client.with_ca(&std::fs::read(ca)?)?;
    }
    let out: Value = match &cli.command {
        Cmd::Create { class, json } => {
            let c = client
                .create_object(class, &serde_json::from_str(json)?)
                .await?;
            serde_json::json!({"objectId": c.object_id, "createdAt": c.created_at})
        }
        Cmd::Get { class, id } => client.get_object(class, id).await?.unwrap_or(Value::Null),
        Cmd::Update { class, id, json } => {
            client
                .update_object(class, id, &serde_json::from_str(json)?)
                .await?
                .body
        }
        Cmd::Delete { class, id } => client.delete_object(class, id).await?.body,
        Cmd::List { class, params } => {
            let pairs: Vec<(&str, &str)> =
                params.iter().filter_map(|p| p.split_once('=')).collect();
            client.query(class, &pairs).await?
        }
        Cmd::Functions(f) => functions(&client, f).await?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

async fn functions(client: &Client, cmd: &FunctionsCmd) -> anyhow::Result<Value> {
    use reqwest::Method;
    Ok(match cmd {
        FunctionsCmd::Deploy { dir, prune } => functions_dir::deploy(client, dir, *prune).await?,
        FunctionsCmd::List => {
            client
                .request(Method::GET, "/1/functions", None, true)
                .await?
                .body
        }
        FunctionsCmd::Call { name, json } => {
            let params: Value = serde_json::from_str(json)?;
            let path = format!("/1/functions/{name}");
            client
                .request(Method::POST, &path, Some(&params), false)
                .await?
                .body
        }
        FunctionsCmd::Delete { name } => {
            let path = format!("/1/functions/{name}");
            client
                .request(Method::DELETE, &path, None, true)
                .await?
                .body
        }
    })
}
