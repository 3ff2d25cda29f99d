use super::*;
use crate::model::{Profile, ServerOptions};

fn domain(name: &str) -> Domain {
    name.parse().unwrap()
}

fn backend(addrs: &[&str]) -> Backend {
    let servers = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| Server {
            name: format!("s{}", i + 1).parse().unwrap(),
            addr: a.parse().unwrap(),
            options: ServerOptions::default(),
        })
        .collect();
    Backend::new(servers, Profile::default()).unwrap()
}

fn sample_state() -> EdgeState {
    let mut state = EdgeState::default();
    state
        .domains
        .insert(domain("shop.example.com"), backend(&["10.0.0.5:8080"]));
    state
        .app_domains
        .insert(domain("app.example.com"), "shop".parse().unwrap());
    state.suspended.insert(domain("shop.example.com"));
    state.https.insert(
        domain("shop.example.com"),
        HttpsPolicy::from_map_value("308:31536000:1").unwrap(),
    );
    state
        .limits
        .exempt
        .insert("203.0.113.0/24".parse().unwrap());
    state
}

fn block(key: &str) -> Block {
    Block {
        key: key.parse().unwrap(),
        reason: Note::parse("reason", "scraper").unwrap(),
        author: Note::parse("author", "ops").unwrap(),
        created_at: 1_700_000_000,
        expires_at: Some(1_700_003_600),
    }
}

#[test]
fn every_object_of_a_state_reads_back_as_itself() {
    let proxies = [(
        "10.9.0.0/16".parse().unwrap(),
        Some(ProxyPreset::Cloudflare),
    )];
    let objects = objects_of(&sample_state(), &proxies, &[block("192.0.2.7")]);
    assert_eq!(objects.len(), 8, "{objects:#?}");
    for (key, object) in &objects {
        let path = key.path();
        let parsed_key = ObjectKey::parse(&path).unwrap();
        assert_eq!(&parsed_key, key, "{path}");
        let text = encode(object);
        assert_eq!(
            &decode(key, text.as_bytes()).unwrap(),
            object,
            "{path}: {text}"
        );
    }
}

#[test]
fn a_diff_names_what_changed_and_what_is_gone() {
    let old = objects_of(&sample_state(), &[], &[block("192.0.2.7")]);
    let mut state = sample_state();
    state.suspended.clear();
    state
        .domains
        .insert(domain("shop.example.com"), backend(&["10.0.0.6:8080"]));
    let new = objects_of(&state, &[], &[block("192.0.2.7"), block("192.0.2.8")]);
    let changes = diff(&old, &new);
    let paths: Vec<(String, bool)> = changes
        .iter()
        .map(|(k, v)| (k.path(), v.is_some()))
        .collect();
    assert_eq!(
        paths,
        [
            ("domain/shop.example.com".to_string(), true),
            ("suspended/shop.example.com".to_string(), false),
            ("block/192.0.2.8".to_string(), true),
        ]
    );
    assert!(diff(&new, &new).is_empty());
}

#[test]
fn hand_edited_values_that_do_not_parse_are_refused_with_the_rule() {
    let d = ObjectKey::Domain(domain("a.example.com"));
    let cases: [(&ObjectKey, &str); 6] = [
        (&d, "not json"),
        (&d, r#"{"servers":[{"name":"s1","addr":"10.0.0.1:0"}]}"#),
        (
            &d,
            r#"{"servers":[{"name":"s1","addr":"10.0.0.1:80","options":{"weight":900}}]}"#,
        ),
        (
            &d,
            r#"{"app":"shop","servers":[{"name":"s1","addr":"10.0.0.1:80"}]}"#,
        ),
        (
            &ObjectKey::Limits,
            r#"{"req_window":0,"conn_window":10,"err_window":30,"tarpit":10,"local_exempt":true,"default":""}"#,
        ),
        (
            &ObjectKey::Block("192.0.2.1".parse().unwrap()),
            r#"{"reason":"x","author":"y","created_at":0,"expires_at":null,"extra":1}"#,
        ),
    ];
    for (key, text) in cases {
        assert!(decode(key, text.as_bytes()).is_err(), "{text} was accepted");
    }
}

#[test]
fn keys_that_name_nothing_known_are_refused() {
    for path in [
        "domain",
        "domain/",
        "domain/not a name",
        "teapot/x",
        "block/999.1.1.1",
        "proxy/10.0.0.0/99",
    ] {
        assert!(ObjectKey::parse(path).is_err(), "{path} was accepted");
    }
}

/// A writer's changes, computed from the domains that differ only, are what a diff of every
/// object says: a domain added, one moved from servers to an application, a server changed,
/// a suspension lifted, an HTTPS policy removed, an exempt client and a proxy added.
#[test]
fn the_changes_between_two_states_are_the_diff_of_all_their_objects() {
    let before = sample_state();
    let mut after = before.clone();
    after
        .domains
        .insert(domain("new.example.com"), backend(&["10.0.0.9:80"]));
    after
        .domains
        .insert(domain("shop.example.com"), backend(&["10.0.0.6:8080"]));
    after.domains.remove(&domain("shop.example.com"));
    after
        .app_domains
        .insert(domain("shop.example.com"), "shop".parse().unwrap());
    after.suspended.clear();
    after.https.clear();
    after
        .limits
        .exempt
        .insert("198.51.100.0/24".parse().unwrap());
    let proxies = [("10.9.0.0/16".parse().unwrap(), None)];
    let (old, changes) = changes_between((&before, &[]), (&after, &proxies));
    let all = diff(
        &objects_of(&before, &[], &[]),
        &objects_of(&after, &proxies, &[]),
    );
    assert_eq!(changes, all);
    assert_eq!(changes.len(), 6, "{changes:#?}");
    for (key, _) in &changes {
        let was = objects_of(&before, &[], &[]).get(key).cloned();
        assert_eq!(old.get(key).cloned(), was, "{key:?} before the change");
    }
    assert!(changes_between((&before, &[]), (&before.clone(), &[]))
        .1
        .is_empty());
}
