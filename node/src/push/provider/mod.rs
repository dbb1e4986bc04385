//! The push services, one `Provider` each (`delivery`), and which one a device goes to
//! (`AppProviders::route`): the platform's own service when the app set its credentials
//! (APNs for ios, FCM for android, WNS for windows phone), otherwise the operator's webhook
//! when set. `Providers` holds what is node-wide: the HTTP client and the services' addresses
//! (`--push-endpoint`). Neighbours: `fanout` calls it, `settings` holds the credentials.

pub mod apns;
pub mod fcm;
pub mod webhook;
pub mod wns;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::delivery::{HttpSender, Provider};
use super::settings::PushSettings;
use anyhow::{anyhow, bail, Context};

/// The services whose address `--push-endpoint` may replace.
pub const ENDPOINT_NAMES: [&str; 3] = ["apns", "fcm", "wns"];

/// Node-wide delivery settings: the HTTP client and the services' addresses.
#[derive(Clone)]
pub struct Providers {
    /// HTTP/1.1 or 2, as the service offers (webhooks, FCM, WNS).
    sender: HttpSender,
    /// HTTP/2 only (APNs).
    h2: HttpSender,
    endpoints: Arc<BTreeMap<String, String>>,
    apns_tokens: Arc<apns::ProviderTokens>,
    fcm_auths: Arc<fcm::Authenticators>,
    wns_tokens: Arc<wns::AccessTokens>,
}

impl Providers {
    /// `overrides` are the `NAME=URL` values of `--push-endpoint`; `ca_file` a PEM file of
    /// certificates trusted besides the system's (`--push-ca-file`).
    pub fn new(overrides: &[String], ca_file: Option<&Path>) -> anyhow::Result<Providers> {
        let mut endpoints = BTreeMap::new();
        for o in overrides {
            let (name, url) = o
                .split_once('=')
                .ok_or_else(|| anyhow!("--push-endpoint takes NAME=URL, not {o:?}"))?;
            if !ENDPOINT_NAMES.contains(&name) {
                bail!(
                    "--push-endpoint: unknown service {name:?} (one of {})",
                    ENDPOINT_NAMES.join(", ")
                );
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                bail!("--push-endpoint {name}: {url:?} is not an http:// or https:// URL");
            }
            endpoints.insert(name.to_string(), url.trim_end_matches('/').to_string());
        }
        let extra_roots = match ca_file {
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("--push-ca-file {}", path.display()))?;
                reqwest::Certificate::from_pem_bundle(&pem)
                    .with_context(|| format!("--push-ca-file {}", path.display()))?
            }
            None => Vec::new(),
        };
        let client = |http2_only: bool| {
            let mut b = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(30));
            for c in &extra_roots {
                b = b.add_root_certificate(c.clone());
            }
            if http2_only {
                b = b.http2_prior_knowledge();
            }
            b.build()
        };
        let sender = |http| HttpSender {
            http,
            backoff: Duration::from_millis(500),
            tries: 4,
        };
        Ok(Providers {
            sender: sender(client(false)?),
            h2: sender(client(true)?),
            endpoints: Arc::new(endpoints),
            apns_tokens: Arc::default(),
            fcm_auths: Arc::default(),
            wns_tokens: Arc::default(),
        })
    }

    /// The address `--push-endpoint` gives a service, if any.
    pub fn endpoint(&self, name: &str) -> Option<&str> {
        self.endpoints.get(name).map(String::as_str)
    }

    /// The provider of each device type the app can reach, by device type.
    pub fn for_app(&self, settings: &PushSettings) -> AppProviders {
        let webhook: Option<Arc<dyn Provider>> = settings.webhook.as_ref().map(|w| {
            Arc::new(webhook::Webhook::new(self.sender.clone(), w.clone())) as Arc<dyn Provider>
        });
        let apns: Option<Arc<dyn Provider>> = settings.apns.as_ref().map(|a| {
            Arc::new(apns::Apns::new(
                self.h2.clone(),
                a.clone(),
                self.endpoint("apns"),
                self.apns_tokens.clone(),
            )) as Arc<dyn Provider>
        });
        let fcm: Option<Arc<dyn Provider>> = settings.fcm.as_ref().map(|f| {
            Arc::new(fcm::Fcm::new(
                self.sender.clone(),
                f.clone(),
                self.endpoint("fcm"),
                self.fcm_auths.clone(),
            )) as Arc<dyn Provider>
        });
        let wns: Option<Arc<dyn Provider>> = settings.wns.as_ref().map(|w| {
            Arc::new(wns::Wns::new(
                self.sender.clone(),
                w.clone(),
                self.endpoint("wns"),
                self.wns_tokens.clone(),
            )) as Arc<dyn Provider>
        });
        AppProviders {
            webhook,
            apns,
            fcm,
            wns,
        }
    }
}

/// The providers of one app.
pub struct AppProviders {
    webhook: Option<Arc<dyn Provider>>,
    apns: Option<Arc<dyn Provider>>,
    fcm: Option<Arc<dyn Provider>>,
    wns: Option<Arc<dyn Provider>>,
}

impl AppProviders {
    /// The provider of a device type: its platform's service when the app set it up, else the
    /// webhook; none when the app has neither.
    pub fn route(&self, device_type: &str) -> Option<&Arc<dyn Provider>> {
        let own = match device_type {
            "ios" => self.apns.as_ref(),
            "android" => self.fcm.as_ref(),
            "windows phone" => self.wns.as_ref(),
            _ => None,
        };
        own.or(self.webhook.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked() {
        let p = Providers::new(&["apns=http://127.0.0.1:9/".into()], None).unwrap();
        assert_eq!(p.endpoint("apns"), Some("http://127.0.0.1:9"));
        assert_eq!(p.endpoint("fcm"), None);
        assert!(Providers::new(&["gcm=http://x".into()], None).is_err());
        assert!(Providers::new(&["apns".into()], None).is_err());
        assert!(Providers::new(&["apns=ftp://x".into()], None).is_err());
    }
}
