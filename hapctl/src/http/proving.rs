//! `POST /v1/proofs`: a delivery proved from outside while it happens, from the dashboard.
//! It is `hapctl prove -- hapctl deliver VERSION --app APP`: this binary runs the delivery on
//! this state directory while prove measures the public bind (streams, a probe, the master,
//! the version served); prove's lines are the steps `GET /v1/deliveries/current` shows, and its
//! journal is written where `GET /v1/proofs` reads it.

use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::error::{ApiError, Body};
use super::ApiState;
use crate::contract::DeliveryRequest;
use crate::deliver::DeliveryStep;
use crate::prove::{Options, ProveError, Subject};

pub async fn post_proof(
    State(app): State<ApiState>,
    Body(req): Body<DeliveryRequest>,
) -> Result<Json<Value>, ApiError> {
    let (host, name) = app
        .with_new_edge(move |edge| {
            let name = edge.resolve_app(req.app)?;
            Ok((edge.prove_host(&name)?, name))
        })
        .await?;
    let exe = std::env::current_exe()
        .map_err(|e| ApiError::internal(format!("cannot find the hapctl binary: {e}")))?;
    let version = req.version;
    let options = Options::for_delivery(host, Some(version.to_string()));
    let subject = Subject::Command(vec![
        exe.display().to_string(),
        "deliver".into(),
        version.to_string(),
        "--app".into(),
        name.to_string(),
    ]);
    let live = app.clone();
    live.cutovers()
        .start("prove", name.as_str(), version.as_str());
    let started = Instant::now();
    let measured = app
        .with_new_edge(move |edge| {
            let cutovers = live.cutovers();
            let mut last = Instant::now();
            let mut step = |line: &str| {
                let now = Instant::now();
                let ms = (now - last).as_secs_f64() * 1000.0;
                last = now;
                let (name, detail) = ("prove".to_string(), line.to_string());
                cutovers.step(&DeliveryStep { name, detail, ms });
            };
            Ok(edge.prove(&options, &subject, &mut step))
        })
        .await
        .and_then(|proved| {
            proved.map_err(|e| match e {
                ProveError::Options(_) => ApiError::invalid("version", e.to_string()),
                e => ApiError::new(StatusCode::BAD_GATEWAY, "cannot_measure", e.to_string()),
            })
        });
    let report = match measured {
        Ok(report) => report,
        Err(e) => {
            app.cutovers().finish("error");
            return Err(e);
        }
    };
    let outcome = if report.passed { "proved" } else { "failed" };
    app.cutovers().finish(outcome);
    let journal = report
        .journal
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    let checks: Vec<_> = report.proofs.iter().flat_map(|p| &p.checks).collect();
    let message = match &journal {
        Some(j) => format!("journal {j}"),
        None => "the journal could not be written".into(),
    };
    Ok(Json(json!({
        "kind": "prove", "app": name, "to": version, "outcome": outcome, "passed": report.passed,
        "exit_code": report.exit_code, "total_ms": started.elapsed().as_secs_f64() * 1000.0,
        "message": message, "journal": journal, "checks": checks, "steps": [],
    })))
}
