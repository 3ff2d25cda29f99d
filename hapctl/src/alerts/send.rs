//! Delivering a notice: a POST to each webhook (hyper, TLS through rustls with the system's
//! roots) and one e-mail to `email_to` (lettre, blocking). Each delivery is bounded by
//! `[alerts] timeout`; a failure is reported, never retried here (the next notice tries
//! again). Webhook URLs are shown only as scheme and host, the SMTP password never.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{Message, SmtpTransport, Transport};

use super::message::{email_subject, email_text, webhook_body};
use super::Notice;
use crate::settings::{AlertSettings, SmtpSecurity, SmtpSettings};

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot set up HTTPS for the webhooks: {0}")]
    Tls(std::io::Error),
    #[error("webhook {target}: {message}")]
    Webhook { target: String, message: String },
    #[error("e-mail through {server}: {message}")]
    Smtp { server: String, message: String },
    #[error("cannot read the SMTP password from {path}: {source}; write it there (mode 0600)")]
    Password {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Where one notice went, and how it went.
#[derive(Debug)]
pub struct Delivery {
    /// A webhook's scheme and host, or `smtp:HOST:PORT`.
    pub target: String,
    pub result: Result<(), SendError>,
}

pub struct Sender {
    settings: AlertSettings,
    runtime: tokio::runtime::Runtime,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Sender {
    pub fn new(settings: &AlertSettings) -> Result<Sender, SendError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(SendError::Tls)?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
            .map_err(SendError::Tls)?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Sender {
            settings: settings.clone(),
            runtime,
            client,
        })
    }

    /// Sends `notice` to every webhook and, with `smtp`, by e-mail.
    pub fn send(&self, notice: &Notice) -> Vec<Delivery> {
        let mut done: Vec<Delivery> = self
            .settings
            .webhooks
            .iter()
            .map(|url| Delivery {
                target: url.redacted(),
                result: self.webhook(url.secret(), &url.redacted(), notice),
            })
            .collect();
        if let Some(smtp) = &self.settings.smtp {
            done.push(Delivery {
                target: format!("smtp:{}:{}", smtp.host, smtp.port),
                result: email(smtp, self.settings.timeout, notice),
            });
        }
        done
    }

    fn webhook(&self, url: &str, shown: &str, notice: &Notice) -> Result<(), SendError> {
        let fail = |message: String| SendError::Webhook {
            target: shown.to_string(),
            message,
        };
        let body = webhook_body(notice, self.settings.webhook_format);
        let request = hyper::Request::post(url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, "hapctl-alerts")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| fail(e.to_string()))?;
        let call = async {
            let answer = self.client.request(request).await.map_err(|e| {
                // The error's text may quote the URL (and its token): name only its kind.
                fail(if e.is_connect() {
                    "cannot connect".into()
                } else {
                    "the request failed".into()
                })
            })?;
            let status = answer.status();
            let _ = answer.into_body().collect().await;
            if status.is_success() {
                Ok(())
            } else {
                Err(fail(format!("answered {status}")))
            }
        };
        self.runtime.block_on(async {
            tokio::time::timeout(self.settings.timeout, call)
                .await
                .unwrap_or_else(|_| {
                    Err(fail(format!(
                        "no answer within {} s",
                        self.settings.timeout.as_secs()
                    )))
                })
        })
    }
}

fn email(smtp: &SmtpSettings, timeout: Duration, notice: &Notice) -> Result<(), SendError> {
    let server = format!("{}:{}", smtp.host, smtp.port);
    let fail = |message: String| SendError::Smtp {
        server: server.clone(),
        message,
    };
    let mut message = Message::builder()
        .from(smtp.from.parse().map_err(|e| fail(format!("from: {e}")))?)
        .subject(email_subject(notice))
        .header(ContentType::TEXT_PLAIN);
    for to in &smtp.to {
        message = message.to(to.parse().map_err(|e| fail(format!("to {to}: {e}")))?);
    }
    let message = message
        .body(email_text(notice))
        .map_err(|e| fail(e.to_string()))?;
    let builder = match smtp.security {
        SmtpSecurity::Plain => Ok(SmtpTransport::builder_dangerous(&smtp.host)),
        SmtpSecurity::StartTls => SmtpTransport::starttls_relay(&smtp.host),
        SmtpSecurity::Tls => SmtpTransport::relay(&smtp.host),
    }
    .map_err(|e| fail(e.to_string()))?;
    let mut builder = builder.port(smtp.port).timeout(Some(timeout));
    if let Some((user, file)) = &smtp.auth {
        let password = std::fs::read_to_string(file).map_err(|source| SendError::Password {
            path: file.clone(),
            source,
        })?;
        builder = builder.credentials(Credentials::new(user.clone(), password.trim().to_string()));
    }
    builder
        .build()
        .send(&message)
        .map(drop)
        .map_err(|e| fail(e.to_string()))
}
