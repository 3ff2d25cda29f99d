//! The SPOE agent: SPOP (the `spop` crate's frames and codec) over one HAProxy connection.
//! Each NOTIFY is evaluated by one of the agent's `workers` threads (`pool.rs`) within a
//! deadline; answers go back as they finish (pipelining), in ACK frames that set
//! `txn.waf.verdict` (`block`, `detect`, `pass`), `txn.waf.rules`, `txn.waf.score` or, on a
//! failure of the agent's own, `txn.waf.error`.
//!
//! Memory is bounded by what waits: at most [`MAX_QUEUED`] requests across every connection
//! ([`PER_CONNECTION`] per connection), each at most one frame; a full queue stops the reading,
//! so HAProxy's `timeout processing` gives the domain its failure mode instead of the agent
//! growing.

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
use super::metrics::{AgentMetrics, InspectionOutcome};
use super::pool::Pool;
use super::verdict::WafVerdict;

/// Requests one connection may have in evaluation before the agent stops reading it.
pub const PER_CONNECTION: usize = 64;
/// Requests every connection together may have in evaluation (waiting for a worker included).
pub const MAX_QUEUED: usize = 1024;
/// A connection silent this long is closed: HAProxy closes its idle ones at `timeout idle`
/// (30 s, templates/waf-spoe.conf.j2) and health checks at once, so this is not HAProxy.
const IDLE: Duration = Duration::from_secs(60);
/// Answers gathered into one write at most (HAProxy reads them in one go from its buffer).
const WRITE_BATCH: usize = 16 * 1024;
/// The largest frame the agent accepts (HAProxy offers tune.bufsize - 4, 16380 by default).
const MAX_FRAME: u32 = 256 * 1024;

pub struct Agent {
    engine: RwLock<Arc<Engine>>,
    pool: Pool,
    queued: Arc<Semaphore>,
    timeout: Duration,
    /// `[waf] body_max`: what HAProxy sends of a body, to tell a cut one.
    body_max: u32,
    pub metrics: AgentMetrics,
}

impl Agent {
    /// `workers` threads of the agent's own evaluate requests (`pool.rs`).
    pub fn new(
        engine: Engine,
        workers: usize,
        timeout: Duration,
        body_max: u32,
    ) -> std::io::Result<Agent> {
        let pool = Pool::start(workers, MAX_QUEUED)?;
        Ok(Agent::with_pool(engine, pool, timeout, body_max))
    }

    fn with_pool(engine: Engine, pool: Pool, timeout: Duration, body_max: u32) -> Agent {
        Agent {
            engine: RwLock::new(Arc::new(engine)),
            pool,
            queued: Arc::new(Semaphore::new(MAX_QUEUED)),
            timeout,
            body_max,
            metrics: AgentMetrics::default(),
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
        let answer = self.pool.submit(self.engine(), req);
        // Past the deadline the receiver is dropped: a worker that has not taken the request
        // yet skips it; one evaluating it finishes, and the bound on workers holds.
        let answer = match tokio::time::timeout(self.timeout, answer).await {
            Err(_) => Answer::Error("timeout"),
            Ok(Err(_)) => Answer::Error("internal"),
            Ok(Ok(answer)) => answer,
        };
        self.metrics.record(answer.outcome(), start.elapsed());
        answer
    }
}

/// Evaluates `req` on this thread and scores it under its policy: a worker's whole job (and
/// the floor `hapctl-bench --only waf` measures the agent against).
pub fn evaluate(engine: &Engine, req: &Inspect) -> Answer {
    let uri = req.uri();
    let Ok(matches) = engine.evaluate(&req.request(&uri), req.policy.paranoia) else {
        return Answer::Error("engine");
    };
    let v = WafVerdict::score(&matches, &req.policy, &req.path);
    match (v.over, req.policy.mode) {
        (true, WafMode::Block) => Answer::Block(v),
        (true, _) => Answer::Detect(v),
        // What arrived is clean, but not all the body it must inspect arrived:
        // the domain's failure mode decides, never a silent pass.
        (false, _) if req.body_cut => Answer::Error("body"),
        (false, _) => Answer::Pass(v),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Pass(WafVerdict),
    Detect(WafVerdict),
    Block(WafVerdict),
    Error(&'static str),
}

impl Answer {
    fn outcome(&self) -> InspectionOutcome<'_> {
        match self {
            Answer::Pass(_) => InspectionOutcome::Pass,
            Answer::Detect(v) => InspectionOutcome::Detected(&v.rules),
            Answer::Block(v) => InspectionOutcome::Blocked(&v.rules),
            Answer::Error("timeout") => InspectionOutcome::Timeout,
            Answer::Error(_) => InspectionOutcome::Error,
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
    let (mut rd, wr) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel::<Frame>(PER_CONNECTION);
    // The writer owns the write half; it stops when every sender is gone.
    let writer = tokio::spawn(write_frames(wr, rx));
    let in_flight = Arc::new(Semaphore::new(PER_CONNECTION));
    let mut codec = SpopCodec::new(MAX_FRAME);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    'read: loop {
        while let Some(frame) = codec.decode(&mut buf)? {
            let open = match *frame.frame_type() {
                FrameType::HaproxyHello => hello(frame, &mut codec, &tx).await,
                FrameType::HaproxyDisconnect => {
                    let _ = tx.send(disconnect(StatusCode::None)).await;
                    false
                }
                FrameType::Notify => {
                    notify(&agent, &in_flight, frame, &tx).await;
                    true
                }
                _ => true,
            };
            if !open {
                break 'read;
            }
        }
        let Ok(read) = tokio::time::timeout(IDLE, rd.read_buf(&mut buf)).await else {
            break; // silent past IDLE
        };
        if read? == 0 {
            break;
        }
    }
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

type Frame = Box<dyn SpopFrame>;

/// Writes the frames `rx` hands over until a disconnect, or every sender is gone. The answers
/// ready together leave in one write (one segment, one wake-up of HAProxy's applet).
async fn write_frames<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Frame>,
) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    let mut enc = SpopCodec::new(MAX_FRAME);
    let mut next = rx.recv().await;
    while let Some(frame) = next.take() {
        let close = *frame.frame_type() == FrameType::AgentDisconnect;
        enc.encode(frame, &mut out)?;
        if !close && out.len() < WRITE_BATCH {
            next = rx.try_recv().ok();
            if next.is_some() {
                continue;
            }
        }
        wr.write_all(&out).await?;
        out.clear();
        if close {
            break;
        }
        next = rx.recv().await;
    }
    wr.shutdown().await
}

/// Answers HAProxy's HELLO, the version and frame size negotiated; false when the
/// connection ends (refused, or a health check).
async fn hello(frame: Frame, codec: &mut SpopCodec, tx: &mpsc::Sender<Frame>) -> bool {
    let Ok(hello) = HaproxyHello::try_from(frame.payload()) else {
        let _ = tx.send(disconnect(StatusCode::Invalid)).await;
        return false;
    };
    let (Some(version), Ok(size)) = (
        hello.negotiate_version(),
        hello.negotiate_max_frame_size(MAX_FRAME),
    ) else {
        let _ = tx.send(disconnect(StatusCode::BadVersion)).await;
        return false;
    };
    codec.set_max_frame_size(size);
    let reply = AgentHello {
        version,
        max_frame_size: size,
        capabilities: vec![FrameCapabilities::Pipelining],
    };
    tx.send(Box::new(reply)).await.is_ok() && hello.healthcheck != Some(true)
}

/// Inspects the request of a NOTIFY on its own task, once the connection's and the agent's
/// bounds let it in; its ACK goes back when it is done.
async fn notify(
    agent: &Arc<Agent>,
    in_flight: &Arc<Semaphore>,
    frame: Frame,
    tx: &mpsc::Sender<Frame>,
) {
    let meta = frame.metadata();
    let ack = Ack::new(meta.stream_id, meta.frame_id);
    let FramePayload::ListOfMessages(messages) = frame.payload() else {
        return;
    };
    let Some(m) = messages.iter().find(|m| m.name == MESSAGE) else {
        // Not ours: an empty ACK, so HAProxy does not wait for the timeout.
        let _ = tx.send(Box::new(ack)).await;
        return;
    };
    let permit = (
        in_flight.clone().acquire_owned().await.ok(),
        agent.queued.clone().acquire_owned().await.ok(),
    );
    let (agent, tx) = (agent.clone(), tx.clone());
    let parsed = Inspect::from_message(m, agent.body_max);
    tokio::spawn(async move {
        let _permit = permit;
        let answer = match parsed {
            Ok(req) => agent.inspect(req).await,
            Err(_) => {
                agent
                    .metrics
                    .record(InspectionOutcome::Error, Duration::ZERO);
                Answer::Error("message")
            }
        };
        let _ = tx.send(Box::new(answer.ack(ack))).await;
    });
}

fn disconnect(status: StatusCode) -> Frame {
    Box::new(AgentDisconnect {
        status_code: status.to_u32(),
        message: status.message().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::model::WafPolicy;

    /// The real libmodsecurity with one rule that counts (an id in the CRS's request range),
    /// and no worker yet.
    fn agent(timeout: Duration) -> Arc<Agent> {
        let rules = "SecRuleEngine DetectionOnly\n\
            SecRule ARGS \"@contains attack\" \"id:942999,phase:1,pass,log,severity:CRITICAL,msg:'test'\"";
        let engine = Engine::from_rules(rules).unwrap_or_else(|e| {
            panic!("{e} (scripts/ensure-test-tools.sh installs libmodsecurity3)")
        });
        Arc::new(Agent::with_pool(
            engine,
            Pool::idle(MAX_QUEUED),
            timeout,
            8192,
        ))
    }

    fn request(query: &str) -> Inspect {
        Inspect {
            policy: WafPolicy {
                mode: WafMode::Block,
                ..WafPolicy::default()
            },
            id: "0f0e-test".into(),
            client_ip: "127.0.0.1".into(),
            client_port: 5000,
            method: "GET".into(),
            path: "/".into(),
            query: query.into(),
            version: "1.1".into(),
            headers: vec![(b"Host".to_vec(), b"a.test".to_vec())],
            body: Vec::new(),
            body_cut: false,
        }
    }

    #[tokio::test]
    async fn a_request_waits_for_a_worker_and_its_deadline_answers_for_it() {
        let agent = agent(Duration::from_millis(300));
        // No worker free: the request waits, and the agent's own deadline answers (an error
        // HAProxy turns into the domain's failure mode) before HAProxy gives up.
        let waited = Instant::now();
        assert_eq!(
            agent.inspect(request("q=attack")).await,
            Answer::Error("timeout")
        );
        assert!(waited.elapsed() >= Duration::from_millis(300));
        // The worker that comes skips the request nobody waits for any more.
        agent.pool.add_workers(1).unwrap();
        let blocked = agent.inspect(request("q=attack")).await;
        assert!(
            matches!(&blocked, Answer::Block(v) if v.rules == [942999] && v.score == 5),
            "{blocked:?}"
        );
        let clean = agent.inspect(request("q=fine")).await;
        assert!(matches!(clean, Answer::Pass(_)), "{clean:?}");
        let s = agent.metrics.snapshot(&Default::default());
        assert_eq!(
            (s.inspected, s.timeouts, s.blocked, s.errors),
            (3, 1, 1, 0),
            "{s:?}"
        );
        assert_eq!(s.by_rule.get(&942999), Some(&1));
    }

    #[tokio::test]
    async fn answers_ready_together_leave_in_order_and_a_disconnect_ends_the_writing() {
        let (mut peer, ours) = tokio::io::duplex(64 * 1024);
        let (tx, rx) = mpsc::channel::<Frame>(PER_CONNECTION);
        let mut acks = BytesMut::new();
        let mut enc = SpopCodec::new(MAX_FRAME);
        for id in 1..=3 {
            let ack = Answer::Pass(WafVerdict::score(&[], &WafPolicy::default(), "/"))
                .ack(Ack::new(id, id));
            enc.encode(Box::new(ack.clone()) as Frame, &mut acks)
                .unwrap();
            tx.send(Box::new(ack)).await.unwrap();
        }
        tx.send(disconnect(StatusCode::None)).await.unwrap();
        // Behind the disconnect: never written.
        tx.send(Box::new(Ack::new(9, 9))).await.unwrap();
        write_frames(ours, rx).await.unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        assert!(got.starts_with(&acks), "the answers, in order");
        // Then the disconnect alone (its key-value list has no fixed order, and the codec
        // reads only HAProxy's frames): one frame of type AGENT-DISCONNECT (102) to the end.
        let rest = &got[acks.len()..];
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        assert_eq!((len + 4, rest[4]), (rest.len(), 102), "{rest:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed() {
        let agent = agent(Duration::from_millis(300));
        let (mut peer, ours) = tokio::io::duplex(1024);
        let start = tokio::time::Instant::now();
        // Paused time: the runtime jumps to the idle deadline once nothing else can run.
        tokio::time::timeout(IDLE * 2, serve_connection(agent, ours))
            .await
            .expect("still open past IDLE")
            .unwrap();
        assert_eq!(start.elapsed(), IDLE);
        let mut byte = [0u8; 1];
        assert_eq!(peer.read(&mut byte).await.unwrap(), 0, "closed");
    }
}
