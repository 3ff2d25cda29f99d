use std::path::Path;

use super::*;
use crate::model::{Backend, BlockKey, Server, ServerName};
use crate::settings::DEFAULT_SETTINGS_TOML;

fn settings() -> Settings {
    Settings::parse(
        Path::new("/srv/h"),
        Path::new("hapctl.toml"),
        DEFAULT_SETTINGS_TOML,
    )
    .unwrap()
}

fn backend(specs: &[&str], profile: &str) -> Backend {
    let servers = specs
        .iter()
        .enumerate()
        .map(|(i, s)| Server::parse_spec(s, ServerName::nth(i + 1)).unwrap())
        .collect();
    Backend::new(servers, profile.parse().unwrap()).unwrap()
}

fn sample_state() -> EdgeState {
    let mut state = EdgeState::default();
    state.domains.insert(
        "shop.example.com".parse().unwrap(),
        backend(
            &["10.0.0.1:80", "10.0.0.2:80,weight=5,maxconn=50"],
            "default",
        ),
    );
    state.domains.insert(
        "*.example.com".parse().unwrap(),
        backend(&["[2001:db8::1]:8080,nocheck"], "websocket"),
    );
    state.domains.insert(
        "*.eu.example.com".parse().unwrap(),
        backend(&["app.internal:9000"], "http-check:/healthz"),
    );
    state.domains.insert(
        "events.example.org".parse().unwrap(),
        backend(&["10.0.0.3:80"], "sse"),
    );
    state.trusted_proxies.insert("10.9.0.0/16".parse().unwrap());
    state
}

fn text(set: &FileSet, id: FileId) -> String {
    String::from_utf8(set.get(id).unwrap().bytes.clone()).unwrap()
}

#[test]
fn rendering_is_deterministic_and_complete() {
    let t = Templates::embedded();
    let a = render(&sample_state(), &settings(), &t).unwrap();
    let b = render(&sample_state(), &settings(), &t).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.files().len(), FileId::RENDERED.len());
    for f in a.files() {
        assert!(f.bytes.ends_with(b"\n"), "{} lacks a final LF", f.id.name());
        let head = String::from_utf8_lossy(&f.bytes[..80.min(f.bytes.len())]).into_owned();
        assert!(
            head.contains("Managed by hapctl"),
            "{}: {head}",
            f.id.name()
        );
    }
}

#[test]
fn maps_route_exact_names_and_longest_wildcards_first() {
    let set = render(&sample_state(), &settings(), &Templates::embedded()).unwrap();
    let hosts = text(&set, FileId::HostsMap);
    assert!(
        hosts.contains("shop.example.com d_shop.example.com\n"),
        "{hosts}"
    );
    assert!(!hosts.contains("w_"), "{hosts}");
    let wild = text(&set, FileId::WildcardsMap);
    let eu = wild.find(".eu.example.com w_eu.example.com").unwrap();
    let all = wild.find(".example.com w_example.com").unwrap();
    assert!(eu < all, "{wild}");
    assert_eq!(
        String::from_utf8(blocked_map(&["203.0.113.0/24"
            .parse::<BlockKey>()
            .unwrap()]))
        .unwrap()
        .lines()
        .last(),
        Some("203.0.113.0/24 1")
    );
    assert_eq!(
        text(&set, FileId::TrustedProxies).lines().last(),
        Some("10.9.0.0/16")
    );
}

#[test]
fn backends_follow_their_profile() {
    let cfg = text(
        &render(&sample_state(), &settings(), &Templates::embedded()).unwrap(),
        FileId::Config,
    );
    assert!(cfg.contains("bind 127.0.0.1:8080"), "{cfg}");
    assert!(cfg.contains("map(/srv/h/live/maps/hosts.map)"), "{cfg}");
    let section = |name: &str| {
        let start = cfg
            .find(&format!("backend {name}\n"))
            .unwrap_or_else(|| panic!("no {name}"));
        let rest = &cfg[start + 1..];
        rest[..rest.find("\nbackend ").unwrap_or(rest.len())].to_string()
    };
    let shop = section("d_shop.example.com");
    assert!(shop.contains("server s1 10.0.0.1:80 check\n"), "{shop}");
    assert!(
        shop.contains("server s2 10.0.0.2:80 check weight 5 maxconn 50"),
        "{shop}"
    );
    let ws = section("w_example.com");
    assert!(
        ws.contains("timeout tunnel 1h") && ws.contains("balance leastconn"),
        "{ws}"
    );
    assert!(ws.contains("server s1 [2001:db8::1]:8080\n"), "{ws}");
    let hc = section("w_eu.example.com");
    assert!(hc.contains("option httpchk GET /healthz"), "{hc}");
    // Without [resolvers] too: a name that does not resolve leaves its server in maintenance.
    assert!(
        hc.contains("server s1 app.internal:9000 check init-addr last,libc,none\n"),
        "{hc}"
    );
    let sse = section("d_events.example.org");
    assert!(sse.contains("timeout server 1h"), "{sse}");
}

#[test]
fn overrides_replace_embedded_templates_and_unknown_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocked.html.j2"), "<p>go away</p>").unwrap();
    let t = Templates::load(Some(dir.path())).unwrap();
    let set = render(&EdgeState::default(), &settings(), &t).unwrap();
    assert_eq!(text(&set, FileId::BlockedPage), "<p>go away</p>\n");
    std::fs::write(dir.path().join("haproxy.cfg.jinja"), "x").unwrap();
    let e = Templates::load(Some(dir.path())).unwrap_err().to_string();
    assert!(
        e.contains("haproxy.cfg.jinja") && e.contains("haproxy.cfg.j2"),
        "{e}"
    );
}

#[test]
fn a_template_using_an_unknown_variable_fails_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("generation.cfg.j2"), "{{ nope }}").unwrap();
    let t = Templates::load(Some(dir.path())).unwrap();
    let e = render(&EdgeState::default(), &settings(), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("generation.cfg.j2"), "{e}");
}

#[test]
fn the_generation_file_has_one_server_line_per_app_and_apps_can_take_domains() {
    let toml = format!(
        "{DEFAULT_SETTINGS_TOML}\n[[app]]\nname = \"pub-maj-app\"\nbackend = \"applicatif\"\nserver = \"courante\"\nreadiness_path = \"/pret\"\nports = {{ \"1.4.2\" = 18211 }}\n[app.runner]\nkind = \"systemd\"\nunit = \"pub-maj-app@{{version}}.service\"\n"
    );
    let settings = Settings::parse(Path::new("/srv/h"), Path::new("t"), &toml).unwrap();
    let mut state = EdgeState::default();
    let app: crate::model::AppName = "pub-maj-app".parse().unwrap();
    state
        .app_domains
        .insert("lab.example.com".parse().unwrap(), app.clone());
    let none = render(&state, &settings, &Templates::embedded()).unwrap();
    assert!(
        !text(&none, FileId::Generation).contains("    server "),
        "no server before the first delivery"
    );

    state.live_generations.insert(
        app,
        crate::model::Generation {
            version: "1.4.2".parse().unwrap(),
            port: 18211.try_into().unwrap(),
        },
    );
    let set = render(&state, &settings, &Templates::embedded()).unwrap();
    let gen = text(&set, FileId::Generation);
    assert!(gen.contains("backend applicatif\n"), "{gen}");
    assert!(
        gen.contains("    option httpchk GET /pret\n    http-check expect status 200\n"),
        "{gen}"
    );
    assert_eq!(gen.matches("    server ").count(), 1, "{gen}");
    assert!(
        gen.contains("    server courante 127.0.0.1:18211 check inter 1s fall 3 rise 2\n"),
        "{gen}"
    );
    assert!(text(&set, FileId::HostsMap).contains("lab.example.com applicatif\n"));
}

#[test]
fn a_domain_routed_to_an_unconfigured_app_is_an_error() {
    let mut state = EdgeState::default();
    state
        .app_domains
        .insert("x.example.com".parse().unwrap(), "gone".parse().unwrap());
    let e = render(&state, &settings(), &Templates::embedded())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gone") && e.contains("x.example.com"), "{e}");
}

#[test]
fn profiles_are_a_map_and_normalisation_is_a_setting() {
    use crate::model::{DomainProtections, ProtectProfile};
    let mut state = sample_state();
    let mut wp = DomainProtections::default();
    wp.profiles.insert(ProtectProfile::WordPress);
    state
        .protections
        .insert("shop.example.com".parse().unwrap(), wp.clone());
    wp.wp_admin_gate = false;
    state
        .protections
        .insert("*.example.com".parse().unwrap(), wp);
    let on = render(&state, &settings(), &Templates::embedded()).unwrap();
    assert!(text(&on, FileId::ProfilesMap).ends_with("\nshop.example.com 30:60:wordpress:\n"));
    assert!(text(&on, FileId::ProfilesWildcardsMap)
        .ends_with("\n.example.com 30:60:wordpress:wp-gate-off:\n"));
    let cfg = text(&on, FileId::Config);
    assert!(cfg.contains("    expose-experimental-directives\n"));
    assert!(cfg.contains("http-request normalize-uri path-strip-dotdot full\n"));
    assert!(cfg.contains("backend st_wp_login\n    stick-table type ipv6 size 100k expire 30m store http_req_rate(60s)\n"));
    assert!(cfg.contains("str(wordpress:login-cookie)"));

    let toml = DEFAULT_SETTINGS_TOML.replace("# normalize_uri = true", "normalize_uri = false");
    let off = Settings::parse(Path::new("/srv/h"), Path::new("t"), &toml).unwrap();
    let cfg = text(
        &render(&state, &off, &Templates::embedded()).unwrap(),
        FileId::Config,
    );
    assert!(!cfg.contains("normalize-uri") && !cfg.contains("expose-experimental"));
}

#[test]
fn workers_drop_privileges_only_when_the_master_starts_as_root() {
    use crate::settings::{Account, Privileges};
    let mut s = settings();
    let account = |name: &str, id| {
        Some(Account {
            name: name.into(),
            id,
        })
    };
    s.haproxy.privileges = Privileges {
        user: account("haproxy", 102),
        group: account("haproxy", 105),
        chroot: Some("/var/empty".into()),
        master_is_root: true,
    };
    let t = Templates::embedded();
    let cfg = text(&render(&sample_state(), &s, &t).unwrap(), FileId::Config);
    let global = cfg.split("\ndefaults").next().unwrap();
    for line in [
        "    user haproxy\n",
        "    group haproxy\n",
        "    chroot /var/empty\n",
    ] {
        assert!(global.contains(line), "{line:?} in {global}");
    }
    s.haproxy.privileges.master_is_root = false;
    let cfg = text(&render(&sample_state(), &s, &t).unwrap(), FileId::Config);
    for word in ["\n    user ", "\n    group ", "\n    chroot "] {
        assert!(!cfg.contains(word), "{word:?} without root");
    }
}

#[test]
fn slotted_domains_are_served_from_their_slot_and_spare_slots_are_empty() {
    use crate::model::{BackendSlot, Placement, SlotKind};
    let mut state = sample_state();
    let placed: crate::model::Domain = "new.example.com".parse().unwrap();
    state.domains.insert(
        placed.clone(),
        backend(&["10.0.0.7:80", "10.0.0.8:80,weight=3"], "default"),
    );
    let capacity = std::collections::BTreeMap::from([(SlotKind::Default, 3)]);
    let slot = BackendSlot {
        kind: SlotKind::Default,
        index: 1,
    };
    state.placement =
        Placement::new(capacity, std::collections::BTreeMap::from([(placed, slot)])).unwrap();
    let set = render(&state, &settings(), &Templates::embedded()).unwrap();
    let config = text(&set, FileId::Config);
    assert!(
        config.contains(
            "\nbackend slot_default_1\n    # slot: new.example.com (default)\n    balance roundrobin\n    server new.example.com:s1 10.0.0.7:80 check\n    server new.example.com:s2 10.0.0.8:80 check weight 3\n"
        ),
        "{config}"
    );
    for free in [0, 2] {
        assert!(
            config.contains(&format!("\nbackend slot_default_{free}\n    # spare slot (default): empty until a domain takes it at runtime\n    balance roundrobin\n")),
            "{config}"
        );
    }
    assert!(!config.contains("backend d_new.example.com"), "{config}");
    assert!(config.contains("backend d_shop.example.com"));
    let hosts = text(&set, FileId::HostsMap);
    assert!(
        hosts.contains("new.example.com slot_default_1\n"),
        "{hosts}"
    );
    assert!(
        hosts.contains("shop.example.com d_shop.example.com\n"),
        "{hosts}"
    );
}

#[test]
fn a_render_reusing_earlier_sections_gives_the_same_bytes_as_a_fresh_one() {
    use crate::model::{Placement, SlotKind};
    let t = Templates::embedded();
    let plain = settings();
    let mut resolving = settings();
    resolving.resolvers = Some(
        Settings::parse(
            Path::new("/srv/h"),
            Path::new("hapctl.toml"),
            &format!("{DEFAULT_SETTINGS_TOML}\n[resolvers]\nnameservers = [\"127.0.0.1:53\"]\n"),
        )
        .unwrap()
        .resolvers
        .unwrap(),
    );
    let shop: crate::model::Domain = "shop.example.com".parse().unwrap();
    let placed: crate::model::Domain = "new.example.com".parse().unwrap();
    let events: crate::model::Domain = "events.example.org".parse().unwrap();
    // Each step changes what one or more sections are rendered from.
    type Step<'a> = Box<dyn Fn(&mut EdgeState) + 'a>;
    let steps: Vec<Step> = vec![
        Box::new(|_| {}),
        Box::new(|s| {
            s.domains
                .insert(shop.clone(), backend(&["10.0.0.1:80,weight=9"], "default"));
        }),
        Box::new(|s| {
            s.domains
                .insert(placed.clone(), backend(&["10.0.0.7:80"], "default"));
            let capacity = std::collections::BTreeMap::from([(SlotKind::Default, 2)]);
            s.placement = Placement::new(capacity, Default::default()).unwrap();
            let slot = s.placement.place(&placed, SlotKind::Default).unwrap();
            assert_eq!(slot.index, 0);
        }),
        Box::new(|s| {
            s.domains.insert(
                placed.clone(),
                backend(&["10.0.0.7:80", "10.0.0.8:81"], "default"),
            );
        }),
        // Out of the slot into a backend of its own: same domain and servers, other section.
        Box::new(|s| {
            s.placement.release(&placed);
        }),
        Box::new(|s| {
            let sse = Backend::new(
                s.domains[&events].servers().to_vec(),
                "sse".parse().unwrap(),
            )
            .unwrap()
            .with_sse_routing(true);
            s.domains.insert(events.clone(), sse);
        }),
        Box::new(|s| {
            s.domains.remove(&shop);
        }),
        Box::new(|s| {
            s.domains
                .insert(shop.clone(), backend(&["app.internal:80"], "websocket"));
        }),
    ];
    let mut memo = Sections::default();
    let mut state = sample_state();
    for (n, step) in steps.iter().enumerate() {
        step(&mut state);
        // The same state under both settings, so the resolvers' switch is a step too.
        for s in [&plain, &resolving, &plain] {
            let fresh = render(&state, s, &t).unwrap();
            let reused = render_with(&state, s, &t, Some(&mut memo)).unwrap();
            assert_eq!(
                text(&reused, FileId::Config),
                text(&fresh, FileId::Config),
                "step {n}"
            );
            assert_eq!(reused, fresh, "step {n}");
        }
    }
}

#[test]
fn the_waf_agents_backend_is_spop_where_haproxy_has_its_multiplexer() {
    let t = Templates::embedded();
    let config = |spop_backend: bool| {
        let mut s = Settings::parse(
            Path::new("/srv/h"),
            Path::new("hapctl.toml"),
            &format!("{DEFAULT_SETTINGS_TOML}\n[waf]\n"),
        )
        .unwrap();
        s.waf.as_mut().unwrap().spop_backend = spop_backend;
        text(&render(&sample_state(), &s, &t).unwrap(), FileId::Config)
    };
    let backend = |cfg: &str| {
        let at = cfg.find("backend hapctl_waf_agent").unwrap();
        cfg[at..].lines().take(5).collect::<Vec<_>>().join("\n")
    };
    let spop = config(true);
    assert!(
        backend(&spop).contains("\n    mode spop\n"),
        "{}",
        backend(&spop)
    );
    // 2.6 and 3.0 refuse `mode spop`: the TCP defaults' mode stays.
    let tcp = config(false);
    assert!(!tcp.contains("mode spop"), "{}", backend(&tcp));
    assert!(backend(&tcp).contains("option spop-check"));
}
