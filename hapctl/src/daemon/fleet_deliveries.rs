//! `hapctl serve` on an edge of a fleet: this edge's part of the fleet's deliveries. It watches
//! its request key; each new request is delivered here under `hapctl prove`
//! (`Edge::fleet_delivery_part`) and answered in its result key, running first, then proved
//! or failed. A request already answered (same id) is not run again after a restart; one
//! whose run a crash cut short is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::EventType;

use crate::edge::Edge;
use crate::fleet::certs::{parse, put};
use crate::fleet::deliveries::{Outcome, Request, State};
use crate::fleet::{FleetError, FleetLink};

const RETRY: Duration = Duration::from_millis(250);

/// Starts the loop on `link`'s runtime; `edge` is a connection of its own.
pub fn start(link: Arc<FleetLink>, edge: Edge) {
    let edge = Arc::new(Mutex::new(edge));
    let handle = link.handle().clone();
    handle.spawn(async move {
        // An outage is logged once, not at every try.
        let mut failing = None;
        loop {
            if let Err(e) = follow(&link, &edge, &mut failing).await {
                let e = e.to_string();
                if failing.as_ref() != Some(&e) {
                    tracing::warn!(
                        "the fleet's deliveries: {e}; reading this edge's request again"
                    );
                }
                failing = Some(e);
                tokio::time::sleep(RETRY).await;
            }
        }
    });
}

/// `failing` (the last error) is cleared once etcd answered.
async fn follow(
    link: &Arc<FleetLink>,
    edge: &Arc<Mutex<Edge>>,
    failing: &mut Option<String>,
) -> Result<(), FleetError> {
    let key = link
        .layout()
        .delivery_request(link.settings().name.as_str());
    // A prefix read of the exact key (another edge's name may extend this one's).
    let now = link.etcd().read_prefix(&key).await?;
    *failing = None;
    if let Some(kv) = now.kvs.iter().find(|kv| kv.key == key) {
        answer(link, edge, &kv.value).await;
    }
    let mut watch = link.etcd().watch(&key, now.revision + 1).await?;
    loop {
        let response = match watch.message().await {
            Ok(Some(r)) if !r.canceled() && r.compact_revision() == 0 => r,
            _ => {
                return Err(FleetError::Etcd(
                    "the watch of this edge's requests ended".into(),
                ))
            }
        };
        for event in response.events() {
            let Some(kv) = event.kv().filter(|kv| kv.key() == key.as_bytes()) else {
                continue;
            };
            if event.event_type() == EventType::Put {
                answer(link, edge, kv.value()).await;
            }
        }
    }
}

/// Runs the request unless it was answered already, and answers it.
async fn answer(link: &Arc<FleetLink>, edge: &Arc<Mutex<Edge>>, value: &[u8]) {
    let request: Request = match parse("this edge's delivery request", value) {
        Ok(request) => request,
        Err(why) => return tracing::error!("{why}: not run"),
    };
    let result_key = link.layout().delivery_result(link.settings().name.as_str());
    let done = match link.etcd().get(&result_key).await {
        Ok(v) => v
            .and_then(|v| parse::<Outcome>("a delivery result", &v).ok())
            .is_some_and(|o| o.id == request.id && o.state != State::Running),
        Err(e) => return tracing::warn!("cannot read this edge's delivery result: {e}"),
    };
    if done {
        return;
    }
    let running = Outcome {
        id: request.id.clone(),
        state: State::Running,
        from: None,
        to: None,
        message: String::new(),
        journal: None,
        at: crate::clock::unix_now(),
    };
    if let Err(e) = put(link.etcd(), &result_key, &running).await {
        return tracing::warn!("cannot answer the fleet's delivery request: {e}");
    }
    tracing::info!(id = %request.id, app = %request.app, kind = ?request.kind, "this edge's part of a fleet delivery");
    let edge = edge.clone();
    let part = request.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        edge.lock()
            .unwrap_or_else(|e| e.into_inner())
            .fleet_delivery_part(&part)
    })
    .await
    .unwrap_or_else(|e| Outcome {
        state: State::Failed,
        message: format!("the delivery stopped: {e}"),
        ..running
    });
    tracing::info!(id = %request.id, state = ?outcome.state, "{}", outcome.message);
    if let Err(e) = put(link.etcd(), &result_key, &outcome).await {
        tracing::error!("cannot answer the fleet's delivery request (the delivering edge gives up on this one after its bound): {e}");
    }
}
