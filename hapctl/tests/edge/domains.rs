//! Domains and their servers: added and removed through the runtime API (`runtime`,
//! `servers`), servers named by host name (`server_names`), and how requests are routed
//! (`routing`: unknown hosts and event streams).

mod routing;
mod runtime;
mod server_names;
mod servers;
