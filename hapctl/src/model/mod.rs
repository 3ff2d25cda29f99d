//! Typed desired state. Parsing is validation: every type here can only be built from a value
//! that is safe to write into a file HAProxy reads, so nothing downstream re-checks.

mod access;
mod app;
mod block;
mod block_query;
mod error;
mod label;
mod limits;
mod name;
mod peers;
mod placement;
mod presets;
mod profile;
mod protections;
mod server;
mod server_options;
mod state;
mod tls;
mod waf;

pub use access::{Scope, Scopes, TokenName, DEFAULT_TOKEN};
pub use app::{AppName, Generation, Version};
pub use block::{Block, BlockKey, Note, ProxyNet, Ttl};
pub use block_query::{BlockQuery, DEFAULT_PAGE, MAX_PAGE};
pub use error::{bounded, bounded_to, Invalid};
pub use label::{BackendLabel, MAX_LABEL_CHARS};
pub use limits::{
    check_secs, parse_secs, LimitAction, LimitPolicy, LimitRule, LimitStatus, Limits, Slot,
    Windows, LOCAL_NETS, MAX_TARPIT_SECS, MAX_THRESHOLD, MAX_WINDOW_SECS,
};
pub use name::{Domain, DomainBackend, DomainName};
pub use peers::{EdgeName, FleetPeers};
pub use placement::{BackendSlot, DomainBackendOf, Placement, SlotKind, MAX_SPARES};
pub use presets::ProxyPreset;
pub use profile::{HttpPath, Profile};
pub use protections::{
    DomainProtections, PostLimit, ProtectProfile, FIELD_WP_LOGIN_POSTS, FIELD_WP_XMLRPC_POSTS,
    FLAG_WP_GATE_OFF, MAX_POST_LIMIT,
};
pub use server::{HostName, Port, Server, ServerAddr, ServerHost, ServerName};
pub use server_options::{
    Interval, ProxyProtocol, ServerOptions, ServerTls, Sni, TextContext, Verify,
};
pub use state::{Backend, EdgeState, MAX_SERVERS};
pub use tls::{CertName, CertSource, Hsts, HttpsPolicy, Redirect, MAX_HSTS_AGE};
pub use waf::{
    Exclusion, FailMode, RuleId, WafMode, WafPolicy, MAX_BODY_LIMIT, MAX_EXCLUSIONS,
    MAX_WAF_THRESHOLD,
};
