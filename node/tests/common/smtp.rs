//! A minimal SMTP sink on loopback for tests: accepts every message and keeps its text.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Clone, Default)]
pub struct SmtpSink {
    pub port: u16,
    messages: Arc<Mutex<Vec<String>>>,
}

impl SmtpSink {
    pub async fn start() -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind smtp");
        let port = listener.local_addr().expect("addr").port();
        let sink = SmtpSink {
            port,
            messages: Arc::default(),
        };
        let messages = Arc::clone(&sink.messages);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let messages = Arc::clone(&messages);
                tokio::spawn(async move {
                    let _ = session(sock, messages).await;
                });
            }
        });
        sink
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Waits for a message containing `needle` (up to 10 s).
    pub async fn wait_for(&self, needle: &str) -> String {
        for _ in 0..100 {
            if let Some(m) = self
                .messages()
                .into_iter()
                .rev()
                .find(|m| m.contains(needle))
            {
                return m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("no mail containing {needle:?}; got {:?}", self.messages());
    }
}

async fn session(
    sock: tokio::net::TcpStream,
    messages: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let (r, mut w) = sock.into_split();
    let mut lines = BufReader::new(r).lines();
    w.write_all(b"220 sink ready\r\n").await?;
    while let Some(line) = lines.next_line().await? {
        let cmd = line.to_ascii_uppercase();
        if cmd.starts_with("EHLO") {
            w.write_all(b"250-sink\r\n250 8BITMIME\r\n").await?;
        } else if cmd.starts_with("DATA") {
            w.write_all(b"354 go on\r\n").await?;
            let mut text = String::new();
            while let Some(l) = lines.next_line().await? {
                if l == "." {
                    break;
                }
                text.push_str(&l);
                text.push('\n');
            }
            if let Ok(mut m) = messages.lock() {
                m.push(text);
            }
            w.write_all(b"250 queued\r\n").await?;
        } else if cmd.starts_with("QUIT") {
            w.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else {
            w.write_all(b"250 ok\r\n").await?;
        }
    }
    Ok(())
}
