//! The daemon's HTTP API: the router, its handlers, the error mapping, the old manager's
//! routes (`compat/`), the dashboard (`ui/`) and the OpenAPI document.

mod audit;
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
mod traffic;
mod ui;
mod v1;
mod waf;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::access::{Access, Throttle};
use crate::apply::ApplyReport;
use crate::blocks::{BlockChange, BlockReport, ChangeResult};
use crate::daemon::{ApiAuth, Services};
use crate::edge::{DomainChange, DomainResult, Edge, EdgeError};
use crate::settings::Settings;

pub use error::ApiError;

/// The header the command line sends with a change it hands over the unix socket: it wrote
/// the change's audit record itself, as the local user.
pub const CLI_RECORDED: &str = "x-hapctl-cli-recorded";

/// Largest accepted request body.
const BODY_LIMIT: usize = 1024 * 1024;

/// The router `hapctl serve` serves over the daemon's services.
pub fn router(services: Services, auth: ApiAuth) -> axum::Router {
    routes::router(ApiState(Arc::new(Shared {
        services,
        auth,
        guards: routes::guards(),
        throttle: Default::default(),
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
    auth: ApiAuth,
    /// Each route's guard, by method and route path (from the route table).
    guards: routes::Guards,
    /// Wrong tokens by address, to slow guessing down.
    throttle: std::sync::Mutex<Throttle>,
    /// DNS-01 orders between `/api/ssl/dns-challenge/request` and `verify`.
    dns: compat::PendingDns,
    /// The dashboard's signed-in sessions.
    sessions: ui::Sessions,
    /// The steps of the delivery or rollback in progress.
    cutovers: cutover::Cutovers,
}

impl ApiState {
    /// The tokens and the audit trail.
    fn access(&self) -> &Arc<Access> {
        &self.0.auth.access
    }

    /// Whether a token is needed (`false` under `--no-auth`).
    fn auth_required(&self) -> bool {
        self.0.auth.required
    }

    fn guard(&self, method: &axum::http::Method, route: &str) -> Option<routes::Guard> {
        self.0
            .guards
            .get(&(method.clone(), route.to_string()))
            .copied()
    }

    /// How long to hold the answer to a wrong token from `peer` (none from the unix socket).
    fn failed_token(&self, peer: Option<std::net::SocketAddr>) -> std::time::Duration {
        let Some(peer) = peer else {
            return std::time::Duration::ZERO;
        };
        let mut throttle = self.0.throttle.lock().unwrap_or_else(|e| e.into_inner());
        throttle.failed(peer.ip(), Instant::now())
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
