//! Options from a config file. `--config <file>` (or `BASALT_CONFIG`) names a TOML file whose
//! keys are the long option names of `basalt serve` and `basalt dev`:
//!
//! ```toml
//! header-brand = "Bmob"
//! http-header-timeout-secs = 20
//! auth-endpoint = ["weapp=https://proxy.example/weixin"]
//! ```
//!
//! Each key becomes the environment variable of its option (`BASALT_HEADER_BRAND`) unless that
//! variable is set already, so the command line beats the environment, which beats the file,
//! which beats the default. Unknown keys are refused (a typo must not be ignored). Caller:
//! `main`, before the command line is parsed; neighbour: `cli` (the options).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};

/// Environment variable naming the config file.
pub const CONFIG_ENV: &str = "BASALT_CONFIG";

/// The config file the command line (`--config FILE`, `--config=FILE`) or the environment
/// names.
pub fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        if text == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = text.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
        if text == "--" {
            break;
        }
    }
    std::env::var_os(CONFIG_ENV).map(PathBuf::from)
}

/// The (variable, value) pairs the file at `path` sets, for the options in `known` (long name,
/// variable).
pub fn read(path: &Path, known: &[(String, String)]) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the config file {}", path.display()))?;
    parse(&text, known).with_context(|| format!("in the config file {}", path.display()))
}

fn parse(text: &str, known: &[(String, String)]) -> anyhow::Result<Vec<(String, String)>> {
    let table: toml::Table = text.parse().map_err(|e| anyhow!("{e}"))?;
    let mut out = Vec::new();
    for (key, value) in table {
        let long = key.replace('_', "-");
        let env = known
            .iter()
            .find(|(l, _)| *l == long)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| anyhow!("unknown option {key:?}"))?;
        out.push((env, scalar_or_list(&key, &value)?));
    }
    Ok(out)
}

/// A value as its environment variable holds it (lists joined by commas).
fn scalar_or_list(key: &str, v: &toml::Value) -> anyhow::Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| match i {
                toml::Value::Array(_) | toml::Value::Table(_) => {
                    bail!("{key}: a list holds plain values")
                }
                other => scalar_or_list(key, other),
            })
            .collect::<anyhow::Result<Vec<_>>>()?
            .join(","),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Table(_) => bail!("{key}: expected a value, not a table"),
    })
}

/// Sets the variables the config file named on the command line (or by `BASALT_CONFIG`) holds,
/// leaving those already set alone. Runs before any thread is started.
/// `known` lists the options (long name, variable); it is asked for only when there is a file.
pub fn apply(
    args: &[OsString],
    known: impl FnOnce() -> Vec<(String, String)>,
) -> anyhow::Result<()> {
    let Some(path) = config_path(args) else {
        return Ok(());
    };
    for (env, value) in read(&path, &known())? {
        if std::env::var_os(&env).is_none() {
            std::env::set_var(env, value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<(String, String)> {
        vec![
            ("header-brand".into(), "BASALT_HEADER_BRAND".into()),
            (
                "http-header-timeout-secs".into(),
                "BASALT_HTTP_HEADER_TIMEOUT_SECS".into(),
            ),
            ("auth-endpoint".into(), "BASALT_AUTH_ENDPOINT".into()),
        ]
    }

    #[test]
    fn keys_become_the_options_variables() {
        let got = parse(
            "header-brand = \"Bmob\"\nhttp_header_timeout_secs = 20\nauth-endpoint = [\"a=http://x\", \"b=http://y\"]\n",
            &known(),
        )
        .unwrap();
        assert!(got.contains(&("BASALT_HEADER_BRAND".into(), "Bmob".into())));
        assert!(got.contains(&("BASALT_HTTP_HEADER_TIMEOUT_SECS".into(), "20".into())));
        assert!(got.contains(&(
            "BASALT_AUTH_ENDPOINT".into(),
            "a=http://x,b=http://y".into()
        )));
        assert!(parse("header-brnad = \"x\"", &known()).is_err());
        assert!(parse("header-brand = {a = 1}", &known()).is_err());
        assert!(parse("not toml", &known()).is_err());
    }

    #[test]
    fn the_command_line_names_the_file() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            config_path(&args(&["basalt", "--config", "b.toml", "serve"])),
            Some(PathBuf::from("b.toml"))
        );
        assert_eq!(
            config_path(&args(&["basalt", "serve", "--config=c.toml"])),
            Some(PathBuf::from("c.toml"))
        );
    }
}
