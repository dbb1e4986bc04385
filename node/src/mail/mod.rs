//! Outgoing mail: the `Mailer` trait and its two implementations. `SmtpMailer` delivers over
//! SMTP to the relay named by `--smtp-url`; without one, `OutboxMailer` writes each message to
//! `<data-dir>/outbox/` and logs it (development). Callers: `users::email_links`.

use std::path::PathBuf;

use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub struct Mail {
    pub to: String,
    pub subject: String,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("invalid address {0:?}")]
    Address(String),
    #[error("mail delivery failed: {0}")]
    Delivery(String),
}

/// Sends mail.
#[async_trait::async_trait]
pub trait Mailer: Send + Sync {
    async fn send(&self, mail: Mail) -> Result<(), MailError>;
}

/// Delivery over SMTP (no TLS: a relay on loopback or the LAN).
pub struct SmtpMailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl SmtpMailer {
    /// From `smtp://host[:port]` (port 25 by default).
    pub fn new(url: &str, from: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("smtp://")
            .ok_or_else(|| anyhow::anyhow!("--smtp-url must look like smtp://host:port"))?;
        let (host, port) = match rest.trim_end_matches('/').rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>()?),
            None => (rest.trim_end_matches('/').to_string(), 25),
        };
        let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(port)
            .build();
        Ok(SmtpMailer {
            transport,
            from: from.parse()?,
        })
    }
}

#[async_trait::async_trait]
impl Mailer for SmtpMailer {
    async fn send(&self, mail: Mail) -> Result<(), MailError> {
        let to: Mailbox = mail
            .to
            .parse()
            .map_err(|_| MailError::Address(mail.to.clone()))?;
        let msg = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject)
            .body(mail.body)
            .map_err(|e| MailError::Delivery(e.to_string()))?;
        self.transport
            .send(msg)
            .await
            .map(|_| ())
            .map_err(|e| MailError::Delivery(e.to_string()))
    }
}

/// Development delivery: one file per message in a directory, and a log line.
pub struct OutboxMailer {
    dir: PathBuf,
}

impl OutboxMailer {
    pub fn new(dir: PathBuf) -> Self {
        OutboxMailer { dir }
    }
}

#[async_trait::async_trait]
impl Mailer for OutboxMailer {
    async fn send(&self, mail: Mail) -> Result<(), MailError> {
        let name = format!(
            "{}-{}.txt",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%.3f"),
            basalt_cluster::object::random_alphanumeric(6)
        );
        let text = format!(
            "To: {}\nSubject: {}\n\n{}\n",
            mail.to, mail.subject, mail.body
        );
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(name), text)
        })
        .await
        .map_err(|e| MailError::Delivery(e.to_string()))?
        .map_err(|e| MailError::Delivery(e.to_string()))?;
        tracing::info!(to = %mail.to, subject = %mail.subject, "mail written to the dev outbox");
        Ok(())
    }
}
