//! The daemon's HTTP API: the router, its handlers, the error mapping, the old manager's
//! routes (`compat/`), the dashboard (`ui/`) and the OpenAPI document.

mod auth;
mod certs;
mod compat;
mod cutover;
mod domain_page;
mod error;
mod history;
mod limits;
mod logs;
mod master;
mod policies;
mod profiles;
mod proving;
mod proxies;
mod routes;
mod ui;
mod v1;
mod waf;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::apply::ApplyReport;
use crate::blocks::{BlockChange, BlockReport, ChangeResult};
use crate::daemon::{ApiToken, Services};
use crate::edge::{DomainChange, DomainResult, Edge, EdgeError};
use crate::settings::Settings;

pub use error::ApiError;

/// Largest accepted request body.
const BODY_LIMIT: usize = 1024 * 1024;

/// The router `hapctl serve` serves over the daemon's services.
pub fn router(services: Services, token: ApiToken) -> axum::Router {
    routes::router(ApiState(Arc::new(Shared {
        services,
        token,
        dns: compat::PendingDns::default(),
        sessions: ui::Sessions::default(),
        cutovers: cutover::Cutovers::default(),
    })))
}

/// The axum state of every handler: the daemon's services, and what only the HTTP side keeps.
#[derive(Clone)]
pub struct ApiState(Arc<Shared>);

struct Shared {
    services: Services,
    token: ApiToken,
    /// DNS-01 orders between `/api/ssl/dns-challenge/request` and `verify`.
    dns: compat::PendingDns,
    /// The dashboard's signed-in sessions.
    sessions: ui::Sessions,
    /// The steps of the delivery or rollback in progress.
    cutovers: cutover::Cutovers,
}

impl ApiState {
    fn token(&self) -> Option<&str> {
        self.0.token.as_deref()
    }

    fn sessions(&self) -> &ui::Sessions {
        &self.0.sessions
    }

    fn dns(&self) -> &compat::PendingDns {
        &self.0.dns
    }

    fn cutovers(&self) -> &cutover::Cutovers {
        &self.0.cutovers
    }

    fn services(&self) -> &Services {
        &self.0.services
    }

    fn settings(&self) -> Settings {
        self.0.services.settings()
    }
}

/// The daemon's services, answering in the API's error shape (a refusal keeps its status).
impl ApiState {
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, ApiError> {
        Ok(self.0.services.read(f).await?)
    }

    async fn fleet_view(&self) -> Result<crate::fleet::status::FleetView, ApiError> {
        Ok(self.0.services.fleet_view().await?)
    }

    async fn with_new_edge<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, ApiError> {
        Ok(self.0.services.with_new_edge(f).await?)
    }

    async fn with_acme<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, ApiError> {
        Ok(self.0.services.with_acme(f).await?)
    }

    async fn domain_job(
        &self,
        change: Option<DomainChange>,
    ) -> Result<(ApplyReport, Option<DomainResult>), ApiError> {
        Ok(self.0.services.domain_job(change).await?)
    }

    async fn block_job(
        &self,
        changes: Vec<BlockChange>,
    ) -> Result<(Vec<ChangeResult>, BlockReport), ApiError> {
        Ok(self.0.services.block_job(changes).await?)
    }

    async fn block_sync(&self) -> Result<(), ApiError> {
        Ok(self.0.services.block_sync().await?)
    }
}

/// Counts every request by route and status.
async fn count_requests(State(app): State<ApiState>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let response = next.run(req).await;
    app.services()
        .metrics()
        .request(&method, &route, response.status().as_u16());
    tracing::debug!(%method, %route, status = response.status().as_u16(), ms = started.elapsed().as_secs_f64() * 1000.0);
    response
}
