//! Everything that talks to HAProxy: `haproxy -c`, the master CLI (process list, reload),
//! the CLI socket client, and running the master (direct or through systemd).

mod cmdline;
mod handover;
mod master;
pub(crate) mod messages;
mod proc_list;
mod reason;
pub(crate) mod runtime;
pub(crate) mod servers;
mod socket;
mod ssl;
mod supervisor;
pub(crate) mod systemctl;
pub(crate) mod validator;

#[cfg(test)]
mod testutil;

pub use cmdline::{has_configuration, MasterCommand, MasterLayout};
pub use handover::MigrateReq;
pub use master::{Master, MasterError, ReloadError, ReloadReport};
pub use proc_list::{MasterProc, ParseError, ProcList, WorkerProc};
pub use reason::{ReloadKind, ReloadReason};
pub use runtime::{Lookup, RuntimeError, RuntimeMap};
pub use servers::{RuntimeServers, ServerState, RESOLUTION_MAINT};
pub use socket::{CliSocket, SocketError};
pub use ssl::{LoadedCert, RuntimeCerts};
pub use supervisor::{
    Draining, HaproxyStatus, StartReport, StopReport, Supervisor, SupervisorError,
};
pub use validator::{ConfigVerdict, Features, Validator, VersionError};
