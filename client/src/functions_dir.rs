//! `basalt-cli functions deploy <dir>`: a folder of cloud functions, one `<name>.js` file per
//! function (its body: an async function of `request`), each deployed with
//! `PUT /1/functions/<name>` and the master key. A file's first comment lines may say what
//! runs it: `// @trigger beforeSave GameScore` (a class's trigger) or `// @cron 0 3 * * *` (a
//! schedule). With `prune`, the app's functions that the folder lacks are deleted.

use std::path::Path;

use anyhow::{bail, Context};
use basalt_client::Client;
use reqwest::Method;
use serde_json::{json, Map, Value};

/// One function of the folder, as deployed.
#[derive(Debug, PartialEq)]
pub struct FunctionFile {
    pub name: String,
    /// The deploy's JSON body: `source`, and `trigger` + `className` or `cron`.
    pub body: Value,
}

/// Reads the `@trigger` / `@cron` directives of the comment lines that open `source`.
pub fn parse_file(name: &str, source: &str) -> anyhow::Result<FunctionFile> {
    let mut body = Map::new();
    body.insert("source".into(), json!(source));
    for line in source.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(comment) = line.strip_prefix("//") else {
            break;
        };
        let comment = comment.trim();
        if let Some(rest) = comment.strip_prefix("@trigger") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let [event, class] = words.as_slice() else {
                bail!("{name}: `// @trigger <event> <class>`, e.g. `// @trigger beforeSave Post`");
            };
            body.insert("trigger".into(), json!(event));
            body.insert("className".into(), json!(class));
        } else if let Some(rest) = comment.strip_prefix("@cron") {
            let expr = rest.trim();
            if expr.is_empty() {
                bail!("{name}: `// @cron <expression>`, e.g. `// @cron 0 3 * * *`");
            }
            body.insert("cron".into(), json!(expr));
        }
    }
    Ok(FunctionFile {
        name: name.to_string(),
        body: Value::Object(body),
    })
}

/// The functions of `dir`: its `*.js` files, by name.
pub fn read_dir(dir: &Path) -> anyhow::Result<Vec<FunctionFile>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("js") || !path.is_file() {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let source = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        out.push(parse_file(name, &source)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Deploys the folder; answers `{"deployed": [{name, version}], "deleted": [names]}`.
pub async fn deploy(client: &Client, dir: &Path, prune: bool) -> anyhow::Result<Value> {
    let files = read_dir(dir)?;
    if files.is_empty() {
        bail!("no .js files in {}", dir.display());
    }
    let mut deployed = Vec::new();
    for f in &files {
        let path = format!("/1/functions/{}", f.name);
        let r = client
            .request(Method::PUT, &path, Some(&f.body), true)
            .await
            .with_context(|| format!("deploying {}", f.name))?;
        deployed.push(json!({"name": f.name, "version": r.body["version"]}));
    }
    let mut deleted = Vec::new();
    if prune {
        let listed = client
            .request(Method::GET, "/1/functions", None, true)
            .await?
            .body;
        for f in listed["results"].as_array().into_iter().flatten() {
            let Some(name) = f["name"].as_str() else {
                continue;
            };
            if files.iter().all(|d| d.name != name) {
                let path = format!("/1/functions/{name}");
                client.request(Method::DELETE, &path, None, true).await?;
                deleted.push(json!(name));
            }
        }
    }
    Ok(json!({"deployed": deployed, "deleted": deleted}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_say_what_runs_a_function() {
        let f = parse_file("add", "return request.params.a + request.params.b;\n").unwrap();
        assert_eq!(
            f.body,
            json!({"source": "return request.params.a + request.params.b;\n"})
        );
        let src = "// Titles in capitals.\n// @trigger beforeSave Post\n\nrequest.object.t = 1;\n// @cron 1 * * * *\n";
        let f = parse_file("caps", src).unwrap();
        assert_eq!(
            f.body,
            json!({"source": src, "trigger": "beforeSave", "className": "Post"})
        );
        let f = parse_file("nightly", "// @cron 0 3 * * *\nreturn 1;").unwrap();
        assert_eq!(f.body["cron"], "0 3 * * *");
        assert!(parse_file("x", "// @trigger beforeSave\n").is_err());
        assert!(parse_file("x", "// @cron\n").is_err());
    }
}
