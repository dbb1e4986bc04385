//! First start of a cluster: the console account and the default app.
//!
//! Runs on the node started with `--init`, once: the account comes from
//! `BASALT_ADMIN_EMAIL`/`BASALT_ADMIN_PASSWORD` (generated when unset), the default app's keys
//! are generated. Both are printed and written to `<data-dir>/credentials.json` (mode 0600) so
//! `basalt dev`, tests and tools can find them; a generated password is only kept there.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use basalt_cluster::ids::META_GROUP;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::Cluster;
use serde_json::{json, Value};

use crate::apps::{find_app, put_account, put_app, random_key, AppRecord};

const BOOTSTRAP_KEY: &str = "bootstrap";
pub const CREDENTIALS_FILE: &str = "credentials.json";

/// Creates the console account and default app unless the cluster has them; returns the
/// credentials document.
pub async fn bootstrap(cluster: &Cluster, data_dir: &Path, url: &str) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match try_bootstrap(cluster, data_dir, url).await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() < deadline => {
                tracing::info!("bootstrap waiting for the cluster: {e:#}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.context("bootstrap failed")),
        }
    }
}

async fn try_bootstrap(cluster: &Cluster, data_dir: &Path, url: &str) -> anyhow::Result<Value> {
    let path = data_dir.join(CREDENTIALS_FILE);
    if let Some(done) = cluster
        .get_record(META_GROUP, Namespace::Cluster, BOOTSTRAP_KEY)
        .await?
    {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(v) = serde_json::from_str(&text) {
                return Ok(v);
            }
        }
        // The file is gone: rebuild what can be known (never the password).
        let app_id = done["defaultApp"].as_str().unwrap_or_default();
        let app = find_app(cluster, app_id).await?;
        let doc = credentials(
            done["email"].as_str().unwrap_or_default(),
            None,
            app.as_ref(),
            url,
        );
        write_credentials(&path, &doc)?;
        return Ok(doc);
    }
    let email = std::env::var("BASALT_ADMIN_EMAIL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "admin@basalt.local".into());
    let (password, generated) = match std::env::var("BASALT_ADMIN_PASSWORD")
        .ok()
        .filter(|s| !s.is_empty())
    {
        Some(p) => (p, false),
        None => (random_key(16), true),
    };
    put_account(cluster, &email, &password).await?;
    let app = AppRecord::generate("Default", &email);
    put_app(cluster, &app).await?;
    let done = json!({"email": email, "defaultApp": app.application_id});
    cluster
        .put_record(META_GROUP, Namespace::Cluster, BOOTSTRAP_KEY, done, None)
        .await?;
    let doc = credentials(
        &email,
        generated.then_some(password.as_str()),
        Some(&app),
        url,
    );
    write_credentials(&path, &doc)?;
    Ok(doc)
}

fn credentials(email: &str, password: Option<&str>, app: Option<&AppRecord>, url: &str) -> Value {
    let mut doc = json!({"url": url, "console": {"email": email}});
    if let Some(p) = password {
        doc["console"]["password"] = json!(p);
    }
    if let Some(a) = app {
        doc["app"] = json!({
            "applicationId": a.application_id,
            "restKey": a.rest_key,
            "masterKey": a.master_key,
            "accessKey": a.access_key,
            "secretKey": a.secret_key,
            "safeToken": a.safe_token,
        });
    }
    doc
}

fn write_credentials(path: &Path, doc: &Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(doc).context("encoding credentials")?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).context("writing credentials")?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600));
    }
    std::fs::rename(&tmp, path).context("writing credentials")
}

/// Human-readable lines for the credentials document.
pub fn describe(doc: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out = String::new();
    out.push_str(&format!("Basalt is serving at {}\n", s(&doc["url"])));
    out.push_str(&format!(
        "  console account : {}",
        s(&doc["console"]["email"])
    ));
    if let Some(p) = doc["console"]["password"].as_str() {
        out.push_str(&format!(" / password {p}"));
    }
    out.push('\n');
    let app = &doc["app"];
    out.push_str(&format!(
        "  applicationId   : {}\n",
        s(&app["applicationId"])
    ));
    out.push_str(&format!("  REST key        : {}\n", s(&app["restKey"])));
    out.push_str(&format!("  master key      : {}\n", s(&app["masterKey"])));
    out.push_str(&format!("  secret key      : {}\n", s(&app["secretKey"])));
    out
}
