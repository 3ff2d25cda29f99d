//! The domains' backend sections of haproxy.cfg, one per domain, shaped by its profile.

use std::fmt::Write;

use crate::model::{EdgeState, Profile};

/// Every domain's backend section, in domain order.
pub(super) fn sections(state: &EdgeState) -> String {
    // Roughly 200 bytes per backend: one allocation for 10,000 domains.
    let mut out = String::with_capacity(state.domains.len() * 256);
    for (domain, backend) in &state.domains {
        let profile = backend.profile();
        let kind = match profile {
            Profile::Default => "default",
            Profile::WebSocket => "websocket",
            Profile::Sse => "sse",
            Profile::HttpCheck(_) => "http-check",
        };
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "\nbackend {}\n    # {domain} ({kind})\n",
            domain.backend_name()
        );
        out.push_str(match profile {
            Profile::WebSocket => "    balance leastconn\n    timeout tunnel 1h\n",
            Profile::Sse => {
                "    balance roundrobin\n    timeout server 1h\n    option http-no-delay\n"
            }
            Profile::Default | Profile::HttpCheck(_) => "    balance roundrobin\n",
        });
        if let Profile::HttpCheck(path) = profile {
            let _ = write!(
                out,
                "    option httpchk GET {path}\n    http-check expect rstatus ^[23]\n"
            );
        }
        for s in backend.servers() {
            let _ = write!(out, "    server {} {}", s.name, s.addr);
            if s.options.check {
                out.push_str(" check");
            }
            if let Some(w) = s.options.weight {
                let _ = write!(out, " weight {w}");
            }
            if let Some(m) = s.options.maxconn {
                let _ = write!(out, " maxconn {m}");
            }
            out.push('\n');
        }
    }
    out
}
