//! Which host-name servers do not resolve now (`crate::resolve`), as the answer to a domain
//! change and `hapctl status` report them.

use std::time::{Duration, Instant};

use super::{Edge, EdgeError};
use crate::haproxy::{CliSocket, RuntimeServers};
use crate::model::{Backend, Domain, EdgeState};
use crate::resolve::{self, Resolution};
use crate::settings::Settings;

/// Bound of one question to the worker's admin socket.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(2);
/// With `[resolvers]`, how long an answer waits for HAProxy's first runtime resolution of a
/// name libc did not resolve at load: the resolvers ask at once, then `timeout resolve` (1 s)
/// apart. Only a domain with a server in resolution maintenance waits.
const FIRST_RESOLUTION: Duration = Duration::from_millis(1500);
const POLL: Duration = Duration::from_millis(100);

fn servers(settings: &Settings) -> RuntimeServers {
    RuntimeServers::new(CliSocket::new(&settings.paths.admin_socket, SOCKET_TIMEOUT))
}

/// After `domain` was put with `backend` (and the apply succeeded): its servers whose names
/// do not resolve now. HAProxy's own view where it runs, as it has just loaded them; libc
/// lookups where it does not (what it will find when it starts). Takes no lock of the edge.
pub fn after_put(settings: &Settings, domain: &Domain, backend: &Backend) -> Resolution {
    let follows = settings.resolvers.is_some();
    if !resolve::has_names(backend) {
        return Resolution::new(follows);
    }
    let mut state = EdgeState::default();
    state.domains.insert(domain.clone(), backend.clone());
    let wait = if follows {
        FIRST_RESOLUTION
    } else {
        Duration::ZERO
    };
    let deadline = Instant::now() + wait;
    loop {
        let Ok(held) = servers(settings).state(&domain.backend_name()) else {
            let named = backend.servers().iter().map(|s| (domain, s));
            return resolve::by_lookup(named, follows);
        };
        let held: Vec<_> = held.into_values().collect();
        let found = resolve::by_haproxy(&state, Some(domain), &held, follows);
        if found.unresolved.is_empty() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(POLL);
    }
}

impl Edge {
    /// HAProxy's view of every host-name server (`hapctl status`, `GET /v1/status`); `None`
    /// when HAProxy does not answer. hapctl looks nothing up itself here: the status is read
    /// every few seconds, and HAProxy's verdict includes its runtime resolution.
    pub fn resolution_now(&self) -> Result<Option<Resolution>, EdgeError> {
        let follows = self.settings.resolvers.is_some();
        if !self.with_state(|s| s.domains.values().any(resolve::has_names))? {
            return Ok(Some(Resolution::new(follows)));
        }
        let Ok(held) = servers(&self.settings).all() else {
            return Ok(None);
        };
        self.with_state(|s| Some(resolve::by_haproxy(s, None, &held, follows)))
    }
}
