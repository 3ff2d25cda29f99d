//! The SPOE agent: SPOP (the `spop` crate's frames and codec) over loopback TCP or a unix
//! socket. Each NOTIFY is evaluated on a blocking thread under a global bound (`workers`)
//! and a deadline; answers go back as they finish (pipelining), in ACK frames that set
//! `txn.waf.verdict` (`block`, `detect`, `pass`), `txn.waf.rules`, `txn.waf.score` or, on a
//! failure of the agent's own, `txn.waf.error`.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use spop::frame::{FramePayload, FrameType};
use spop::frames::{Ack, AgentDisconnect, AgentHello, FrameCapabilities, HaproxyHello};
use spop::{SpopCodec, SpopFrame, StatusCode, VarScope};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::{Decoder, Encoder};

use crate::model::WafMode;

use super::engine::Engine;
use super::message::{Inspect, MESSAGE};
use super::metrics::{Metrics, Outcome};
use super::verdict::Verdict;

/// Requests one connection may have in evaluation before the agent stops reading it.
const PER_CONNECTION: usize = 64;
/// The largest frame the agent accepts (HAProxy offers tune.bufsize - 4, 16380 by default).
const MAX_FRAME: u32 = 256 * 1024;

pub struct Agent {
    engine: RwLock<Arc<Engine>>,
    workers: Arc<Semaphore>,
    timeout: Duration,
    pub metrics: Metrics,
}

impl Agent {
    pub fn new(engine: Engine, workers: usize, timeout: Duration) -> Agent {
        Agent {
            engine: RwLock::new(Arc::new(engine)),
            workers: Arc::new(Semaphore::new(workers.max(1))),
            timeout,
            metrics: Metrics::default(),
        }
    }

    /// Swaps the rule set; requests in evaluation finish on the old one.
    pub fn replace_engine(&self, engine: Engine) {
        *self.engine.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(engine);
    }

    pub fn engine(&self) -> Arc<Engine> {
        self.engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Inspects one request within the deadline (waiting for a worker counts).
    pub async fn inspect(&self, req: Inspect) -> Answer {
        let start = Instant::now();
        let engine = self.engine();
        let workers = self.workers.clone();
        let job = async move {
            let _permit = workers.acquire_owned().await.ok()?;
            // The permit moves into the thread: a request past its deadline keeps its worker
            // until libmodsecurity returns, so the bound holds.
            tokio::task::spawn_blocking(move || {
                let _permit = _permit;
                let uri = req.uri();
                let matches = engine.evaluate(&req.request(&uri), req.policy.paranoia);
                (req, matches)
            })
            .await
            .ok()
        };
        let answer = match tokio::time::timeout(self.timeout, job).await {
            Err(_) => Answer::Error("timeout"),
            Ok(None) => Answer::Error("internal"),
            Ok(Some((_, Err(_)))) => Answer::Error("engine"),
            Ok(Some((req, Ok(matches)))) => {
                let v = Verdict::score(&matches, &req.policy, &req.path);
                match (v.over, req.policy.mode) {
                    (true, WafMode::Block) => Answer::Block(v),
                    (true, _) => Answer::Detect(v),
                    (false, _) => Answer::Pass(v),
                }
            }
        };
        self.metrics.record(answer.outcome(), start.elapsed());
        answer
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Pass(Verdict),
    Detect(Verdict),
    Block(Verdict),
    Error(&'static str),
}

impl Answer {
    fn outcome(&self) -> Outcome<'_> {
        match self {
            Answer::Pass(_) => Outcome::Pass,
            Answer::Detect(v) => Outcome::Detected(&v.rules),
            Answer::Block(v) => Outcome::Blocked(&v.rules),
            Answer::Error("timeout") => Outcome::Timeout,
            Answer::Error(_) => Outcome::Error,
        }
    }

    fn ack(&self, ack: Ack) -> Ack {
        let (verdict, v) = match self {
            Answer::Error(why) => return ack.set_var(VarScope::Transaction, "error", *why),
            Answer::Pass(v) => ("pass", v),
            Answer::Detect(v) => ("detect", v),
            Answer::Block(v) => ("block", v),
        };
        ack.set_var(VarScope::Transaction, "verdict", verdict)
            .set_var(VarScope::Transaction, "score", v.score)
            .set_var(VarScope::Transaction, "rules", v.rules_text().as_str())
    }
}

/// Serves one HAProxy connection until it closes or breaks the protocol.
pub async fn serve_connection<S>(agent: Arc<Agent>, stream: S) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<Box<dyn SpopFrame>>(PER_CONNECTION);
    let mut codec = SpopCodec::new(MAX_FRAME);
    // The writer owns the write half; it stops when every sender is gone.
    let writer = tokio::spawn(async move {
        let mut out = BytesMut::new();
        let mut enc = SpopCodec::new(MAX_FRAME);
        while let Some(frame) = rx.recv().await {
            let close = *frame.frame_type() == FrameType::AgentDisconnect;
            out.clear();
            enc.encode(frame, &mut out)?;
            wr.write_all(&out).await?;
            if close {
                break;
            }
        }
        wr.shutdown().await
    });
    let in_flight = Arc::new(Semaphore::new(PER_CONNECTION));
    let mut buf = BytesMut::with_capacity(16 * 1024);
    'read: loop {
        while let Some(frame) = codec.decode(&mut buf)? {
            match frame.frame_type() {
                FrameType::HaproxyHello => {
                    let Ok(hello) = HaproxyHello::try_from(frame.payload()) else {
                        let _ = tx.send(disconnect(StatusCode::Invalid)).await;
                        break 'read;
                    };
                    let (Some(version), Ok(size)) = (
                        hello.negotiate_version(),
                        hello.negotiate_max_frame_size(MAX_FRAME),
                    ) else {
                        let _ = tx.send(disconnect(StatusCode::BadVersion)).await;
                        break 'read;
                    };
                    codec.set_max_frame_size(size);
                    let reply = AgentHello {
                        version,
                        max_frame_size: size,
                        capabilities: vec![FrameCapabilities::Pipelining],
                    };
                    if tx.send(Box::new(reply)).await.is_err() || hello.healthcheck == Some(true) {
                        break 'read;
                    }
                }
                FrameType::HaproxyDisconnect => {
                    let _ = tx.send(disconnect(StatusCode::None)).await;
                    break 'read;
                }
                FrameType::Notify => {
                    let meta = frame.metadata();
                    let ack = Ack::new(meta.stream_id, meta.frame_id);
                    let FramePayload::ListOfMessages(messages) = frame.payload() else {
                        continue;
                    };
                    let Some(m) = messages.iter().find(|m| m.name == MESSAGE) else {
                        // Not ours: an empty ACK, so HAProxy does not wait for the timeout.
                        let _ = tx.send(Box::new(ack)).await;
                        continue;
                    };
                    let permit = in_flight.clone().acquire_owned().await.ok();
                    let (agent, tx) = (agent.clone(), tx.clone());
                    let parsed = Inspect::from_message(m);
                    tokio::spawn(async move {
                        let _permit = permit;
                        let answer = match parsed {
                            Ok(req) => agent.inspect(req).await,
                            Err(_) => {
                                agent.metrics.record(Outcome::Error, Duration::ZERO);
                                Answer::Error("message")
                            }
                        };
                        let _ = tx.send(Box::new(answer.ack(ack))).await;
                    });
                }
                _ => {}
            }
        }
        if rd.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

fn disconnect(status: StatusCode) -> Box<dyn SpopFrame> {
    Box::new(AgentDisconnect {
        status_code: status.to_u32(),
        message: status.message().to_string(),
    })
}
