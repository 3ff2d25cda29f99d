//! Certificates: served at the edge end to end (`tls`) and through the daemon's routes, the
//! edge manager's included, with renewal by the daemon (`api`).

mod api;
mod tls;
