//! A change the CLI hands to the running `hapctl serve` of its state directory, over the
//! daemon's unix socket (`run/api.sock`), as kamal-proxy's CLI hands its commands to its
//! server. The daemon's apply worker keeps the parsed state and the rendered backend sections
//! between applies, so the change costs what an API call does (at 10,000 domains about a
//! third of a CLI process that loads and renders everything itself), and it is coalesced with
//! the daemon's other changes. With no daemon listening, the CLI applies the change itself.

use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use hapctl::blocks::BlockReport;
use hapctl::contract::{ChangeAnswer, ErrorAnswer};
use hapctl::edge::DomainResult;
use hapctl::resolve::Resolution;
use hapctl::settings::Settings;

use super::{output, Failure};

/// Longer than the daemon's own bound on an apply (the apply lock waits up to 300 s).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(330);

/// The daemon's answer: HTTP status and JSON body.
pub struct DaemonAnswer {
    pub status: u16,
    pub body: Value,
}

impl DaemonAnswer {
    /// Prints the apply report the answer carries (as a local apply prints its own) and
    /// returns the exit code; an answer without one is the error it names.
    pub fn print_report(&self, json: bool) -> Result<u8, Failure> {
        match self.change() {
            Some(change) => output::print_report_json(&change.apply, json),
            None => Err(self.failure()),
        }
    }

    /// [`DaemonAnswer::print_report`] of a domain put, with the servers that do not resolve now.
    pub fn print_put_report(&self, json: bool) -> Result<u8, Failure> {
        let Some(change) = self.change() else {
            return Err(self.failure());
        };
        let resolution: Option<Resolution> = serde_json::from_value(self.body.clone()).ok();
        output::print_put_report(&change.apply, resolution.as_ref(), json)
    }

    /// The report of a block change; an answer without one is the error it names.
    pub fn block_report(&self) -> Result<BlockReport, Failure> {
        match self.status {
            200 | 201 => serde_json::from_value(self.body.clone()).map_err(|e| {
                anyhow::anyhow!(
                    "`hapctl serve` answered the block change with an unknown shape ({e})"
                )
                .into()
            }),
            _ => Err(self.failure()),
        }
    }

    /// What a domain change did (`created`, `replaced`, `removed`).
    pub fn result(&self) -> Option<DomainResult> {
        self.change().and_then(|c| c.result)
    }

    /// The answer as a change's: its result and its apply report (also carried by the error
    /// of a refused or failed apply).
    fn change(&self) -> Option<ChangeAnswer<Value>> {
        ChangeAnswer::deserialize(&self.body).ok()
    }

    pub fn failure(&self) -> Failure {
        let answer = ErrorAnswer::deserialize(&self.body).ok();
        let message = answer
            .as_ref()
            .map_or("the daemon gave no reason", |a| a.error.message.as_str());
        let code = match self.status {
            400 => 2,
            404 => 7,
            _ => 1,
        };
        Failure {
            code,
            error: anyhow::anyhow!("{message} (answered by `hapctl serve`)"),
        }
    }
}

/// Sends `method path` with `body` to the daemon of `dir`. `None`: no daemon listens there
/// (or the CLI is to apply on its own: a fault-injection run targets this process).
pub fn send(
    dir: &Path,
    method: &str,
    path: &str,
    body: &impl Serialize,
) -> Result<Option<DaemonAnswer>, Failure> {
    if std::env::var_os("HAPCTL_FAULT").is_some() {
        return Ok(None);
    }
    let settings = Settings::load(dir).map_err(anyhow::Error::from)?;
    let socket = settings.paths.api_socket();
    let stream = match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(stream) => stream,
        // No socket, a dead daemon's socket, or not ours to use: apply here.
        Err(_) => return Ok(None),
    };
    let token = std::fs::read_to_string(&settings.api.token_file)
        .map(|t| t.trim().to_string())
        .unwrap_or_default();
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "hapctl")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        // This command's own audit record (as the local user) is written already.
        .header(hapctl::http::CLI_RECORDED, "1")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(body).map_err(anyhow::Error::from)?,
        )))
        .map_err(anyhow::Error::from)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)?;
    let answer = runtime.block_on(async move {
        stream.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(stream)?;
        let exchange = async {
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, bytes))
        };
        tokio::time::timeout(ANSWER_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "`hapctl serve` did not answer within {} s; its log says why",
                    ANSWER_TIMEOUT.as_secs()
                )
            })?
    });
    let (status, bytes) = answer.map_err(|e: anyhow::Error| {
        e.context(format!(
            "sending the change to `hapctl serve` at {} failed",
            socket.display()
        ))
    })?;
    let body = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!("`hapctl serve` answered {status} with a body that is not JSON ({e})")
    })?;
    Ok(Some(DaemonAnswer { status, body }))
}
