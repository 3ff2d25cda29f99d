//! The domains' backend sections of haproxy.cfg, one per domain, shaped by its profile.

use std::fmt::Write;

use crate::model::{EdgeState, Profile, ServerHost};

/// Every domain's backend section, in domain order. With `resolvers` (the section's name),
/// servers named by host name are resolved at runtime and may start unresolved.
pub(super) fn sections(state: &EdgeState, resolvers: Option<&str>) -> String {
    // Roughly 200 bytes per backend: one allocation for 10,000 domains.
    let mut out = String::with_capacity(state.domains.len() * 256);
    for (domain, backend) in &state.domains {
        let profile = backend.profile();
        let kind = match profile {
            Profile::Default => "default",
            Profile::WebSocket => "websocket",
            Profile::Sse => "sse",
            Profile::LongLived => "long-lived",
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
            Profile::LongLived => {
                "    balance roundrobin\n    timeout server 6h\n    timeout tunnel 6h\n    timeout http-keep-alive 6h\n    option http-no-delay\n"
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
            let options = s.options.to_text();
            if !options.is_empty() {
                let _ = write!(out, " {options}");
            }
            if let (Some(r), ServerHost::Name(_)) = (resolvers, &s.addr.host) {
                let _ = write!(out, " resolvers {r} init-addr last,libc,none");
            }
            out.push('\n');
        }
    }
    out
}
