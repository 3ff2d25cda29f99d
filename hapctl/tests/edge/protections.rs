//! Protections: per-client rate limits at the edge (`rate_limits`) and through the API
//! (`limit_routes`), and the path-protection profiles (`profiles`).

mod limit_routes;
mod profiles;
mod rate_limits;
