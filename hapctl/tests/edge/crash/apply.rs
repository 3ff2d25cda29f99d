//! Crash consistency of the apply path.
//!
//! - `every_crash_point_recovers_to_the_old_or_the_new_set`: for every crash point
//!   (`HAPCTL_FAULT`, see `src/apply/fault.rs`), with every kind of change that reaches it (at
//!   least three rounds per point), the apply is SIGKILLed there (sometimes again during the
//!   recovery) and the next command (`hapctl apply`) must leave a consistent edge: the live set
//!   byte-identical to the old or the new set (the one the database holds), accepted by
//!   `haproxy -c`, served by the same master, equal to the known-good snapshot, the database
//!   agreeing (`apply --dry-run`: no change; `domain ls` / `block ls` = what is routed), the
//!   history telling what happened, no temp file and no pending-apply marker.
//! - `a_kill_at_any_instant_recovers_to_the_old_or_the_new_set`: the same checks after a
//!   SIGKILL at a random instant of the command (`HAPCTL_CRASH_SEED` fixes the changes and the
//!   kill delays), including `block add` through the block fast path.
//! - `every_block_crash_point_recovers_to_the_committed_blocks`: the block path's own crash
//!   points (`block-after-base`, `-files`, `-runtime`, `-commit`), for a block (delta map) and
//!   an unblock of a base key (both maps), recovered by `hapctl apply` or by the next block.
//! - Three defects the random kills found, made deterministic: a kill while the reload is in
//!   flight (the recovery did not reload back), temp files of a kill inside an atomic write
//!   outside the live folders (not swept), and a kill between the block map file and the
//!   runtime API (the next apply does not bring HAProxy in line).
//!
//! Edges run in parallel threads; each round starts from the same base state (domain A routed)
//! and returns to it, so every round is checked against known bytes.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hapctl::settings::Settings;
use hapctl::store::{ApplyRecord, Store};

use testkit::daemon::{blocked_map_file_keys, runtime_blocked_keys, BLOCKED_MAPS};
use testkit::{describe, http_get, run_bounded, Backend, Edge, Response};

/// Every crash point on the apply path, in the order an apply reaches them: the runtime paths
/// (domains and servers, or maps alone, through the runtime API) stop after their own points.
const POINTS: [&str; 12] = [
    "before-snapshot",
    "runtime-servers:after-write",
    "runtime-servers:after-push",
    "runtime-maps:after-write",
    "write:1",
    "write:2",
    "write:3",
    "after-write",
    "before-reload",
    "after-reload",
    "before-commit",
    "after-commit",
];
/// The points the runtime path of servers and routes reaches.
const RUNTIME_PATH: [&str; 4] = [
    "before-snapshot",
    "runtime-servers:after-write",
    "runtime-servers:after-push",
    "after-commit",
];
/// The points the runtime path of maps alone reaches.
const MAPS_PATH: [&str; 3] = [
    "before-snapshot",
    "runtime-maps:after-write",
    "after-commit",
];
const ROUNDS_PER_POINT: usize = 3;
const EDGES: usize = 3;

const DOMAIN_A: &str = "a.example.com";
const DOMAIN_B: &str = "b.example.com";
const WILDCARD: &str = "*.w.example.com";
const UNDER_WILDCARD: &str = "x.w.example.com";
const UNKNOWN_HOST: &str = "nobody.example.com";
/// The client a change blocks or trusts as a proxy.
const CLIENT_C: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

type FileSet = Vec<(PathBuf, Vec<u8>)>;

/// The changes a round can make. Each one changes a known number of live files, so the
/// `write:N` points it reaches are known (`write:N` fires after the N-th file of a change of at
/// least N+1 files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Change {
    /// `domain add b.example.com`: haproxy.cfg, hosts.map, through the runtime path (a slot
    /// backend takes its server).
    AddDomain,
    /// `domain rm a.example.com`: haproxy.cfg, hosts.map, through the runtime path.
    RemoveDomain,
    /// `proxy add 127.0.0.3`: trusted-proxies.acl.
    TrustProxy,
    /// `block add 127.0.0.3`: the blocked maps, through the block fast path (database, map
    /// files, runtime API; no apply, so none of the apply's crash points: its own are driven
    /// by `every_block_crash_point_recovers_to_the_committed_blocks`). The blocked maps are
    /// compared by the keys they hold, not byte for byte: which of the two files holds a key
    /// depends on when the block path last folded them.
    Block,
    /// `domain add *.w.example.com --profile websocket`: haproxy.cfg, wildcards.map.
    AddWildcard,
    /// `domain suspend a.example.com`: suspended.map, through the runtime path of maps.
    Suspend,
    /// Template overrides (settings `templates_dir`) + `hapctl apply`: generation.cfg and both
    /// pages.
    Templates3,
    /// The same plus haproxy.cfg.
    Templates4,
}

const ALL_CHANGES: [Change; 8] = [
    Change::AddDomain,
    Change::RemoveDomain,
    Change::TrustProxy,
    Change::Block,
    Change::AddWildcard,
    Change::Suspend,
    Change::Templates3,
    Change::Templates4,
];

impl Change {
    fn files_changed(self) -> usize {
        match self {
            Change::TrustProxy | Change::Suspend => 1,
            Change::Block => 0,
            Change::AddDomain | Change::RemoveDomain | Change::AddWildcard => 2,
            Change::Templates3 => 3,
            Change::Templates4 => 4,
        }
    }

    /// Whether the change lives in the database (committed only by a successful apply) rather
    /// than in the settings (in force as soon as the file is written).
    fn in_database(self) -> bool {
        !matches!(self, Change::Templates3 | Change::Templates4)
    }

    /// Whether the change goes through the apply (and so past its crash points).
    fn via_apply(self) -> bool {
        self != Change::Block
    }

    /// Whether the change goes through the runtime path (no check, no reload).
    fn via_runtime(self) -> bool {
        matches!(self, Change::AddDomain | Change::RemoveDomain)
    }

    /// Whether the change's own command reaches `point`.
    fn reaches(self, point: &str) -> bool {
        if !self.via_apply() {
            return false;
        }
        if self.via_runtime() {
            return RUNTIME_PATH.contains(&point);
        }
        if self == Change::Suspend {
            return MAPS_PATH.contains(&point);
        }
        !point.starts_with("runtime-") && self.reload_path_reaches(point)
    }

    /// Whether an apply writing this change's files through check and reload reaches
    /// `point`: the change itself, or the recovery command once it is committed (a recovery
    /// puts the known-good set back, so it writes the committed set again and reloads).
    fn reload_path_reaches(self, point: &str) -> bool {
        match point.strip_prefix("write:") {
            Some(n) => self.files_changed() > n.parse::<usize>().unwrap(),
            None => !point.starts_with("runtime-"),
        }
    }
}

/// One edge serving domain A, with the bytes and listings of that base state.
struct Fixture {
    edge: Edge,
    a: Backend,
    b: Backend,
    master_pid: i32,
    settings: String,
    base: Snapshot,
    /// `new_state` results by change and variant: rendering is deterministic, so the bytes
    /// of a change made from the base state are the same every time.
    new_states: RefCell<HashMap<(Change, usize), (Snapshot, Duration)>>,
}

/// What an edge looks like in one state: live files and what the database lists.
#[derive(Clone)]
struct Snapshot {
    /// Every live file but the blocked maps.
    files: FileSet,
    /// The keys the blocked map files hold.
    blocked: BTreeSet<String>,
    domains: String,
    /// The suspended domains the database holds (`domain ls` does not show them).
    suspended: String,
    blocks: BTreeSet<String>,
    proxies: String,
}

impl Fixture {
    fn new() -> Fixture {
        let edge = Edge::started();
        let a = Backend::start("A");
        let b = Backend::start("B");
        edge.ok(&["domain", "add", DOMAIN_A, "--server", &a.addr()]);
        let master_pid = edge.master_pid();
        let settings = edge.settings_text();
        let mut fx = Fixture {
            edge,
            a,
            b,
            master_pid,
            settings,
            base: Snapshot {
                files: vec![],
                blocked: BTreeSet::new(),
                domains: String::new(),
                suspended: String::new(),
                blocks: BTreeSet::new(),
                proxies: String::new(),
            },
            new_states: RefCell::new(HashMap::new()),
        };
        fx.base = fx.snapshot();
        fx.expect_routing(Change::AddDomain, false, 0, "fresh edge");
        fx
    }

    fn snapshot(&self) -> Snapshot {
        let blocked_maps = BLOCKED_MAPS.map(|m| self.edge.path(m));
        let mut files = self.edge.live_files();
        files.retain(|(p, _)| !blocked_maps.contains(p));
        Snapshot {
            files,
            blocked: blocked_map_file_keys(&self.edge),
            domains: self.edge.ok(&["domain", "ls", "--json"]),
            suspended: format!("{:?}", self.store().load_state().unwrap().suspended),
            blocks: block_keys(&self.edge.ok(&["block", "ls", "--json"])),
            proxies: self.edge.ok(&["proxy", "ls"]),
        }
    }

    /// Prepares what the change needs on disk (template overrides and settings).
    fn stage(&self, change: Change, variant: usize) {
        if change.in_database() {
            return;
        }
        let dir = format!("tpl-{variant}");
        let tpl = self.edge.path(&dir);
        std::fs::create_dir_all(&tpl).unwrap();
        let comment = format!("# crash-suite variant {variant}\n");
        let html = format!("<!-- crash-suite variant {variant} -->\n");
        let mut overrides = vec![
            (
                "generation.cfg.j2",
                comment.clone() + include_str!("../../../templates/generation.cfg.j2"),
            ),
            (
                "unknown-host.html.j2",
                html.clone() + include_str!("../../../templates/unknown-host.html.j2"),
            ),
            (
                "blocked.html.j2",
                html + include_str!("../../../templates/blocked.html.j2"),
            ),
        ];
        if change == Change::Templates4 {
            overrides.push((
                "haproxy.cfg.j2",
                comment + include_str!("../../../templates/haproxy.cfg.j2"),
            ));
        }
        for (name, text) in overrides {
            std::fs::write(tpl.join(name), text).unwrap();
        }
        let settings = self.settings.replace(
            "# templates_dir = \"templates\"",
            &format!("templates_dir = \"{dir}\""),
        );
        assert_ne!(
            settings, self.settings,
            "the settings have a templates_dir line"
        );
        self.edge.write_settings(&settings);
    }

    /// The command that makes the change (after `stage`).
    fn command_args(&self, change: Change) -> Vec<String> {
        let b = self.b.addr();
        let args: Vec<&str> = match change {
            Change::AddDomain => vec!["domain", "add", DOMAIN_B, "--server", &b],
            Change::RemoveDomain => vec!["domain", "rm", DOMAIN_A],
            Change::TrustProxy => vec!["proxy", "add", "127.0.0.3"],
            Change::Suspend => vec!["domain", "suspend", DOMAIN_A],
            Change::Block => vec![
                "block",
                "add",
                "127.0.0.3",
                "--reason",
                "crash suite",
                "--ttl",
                "1h",
            ],
            Change::AddWildcard => vec![
                "domain",
                "add",
                WILDCARD,
                "--server",
                &b,
                "--profile",
                "websocket",
            ],
            Change::Templates3 | Change::Templates4 => vec!["apply"],
        };
        args.into_iter().map(String::from).collect()
    }

    /// Undoes a change that is live and committed, back to the base state.
    fn revert(&self, change: Change) {
        match change {
            Change::AddDomain => {
                self.edge.ok(&["domain", "rm", DOMAIN_B]);
            }
            Change::RemoveDomain => {
                // Added back at runtime, A takes a slot: compaction puts it back into the
                // backend of its own the base set has.
                self.edge
                    .ok(&["domain", "add", DOMAIN_A, "--server", &self.a.addr()]);
                self.edge.ok(&["apply", "--compact"]);
            }
            Change::TrustProxy => {
                self.edge.ok(&["proxy", "rm", "127.0.0.3"]);
            }
            Change::Block => {
                self.edge.ok(&["block", "rm", "127.0.0.3"]);
            }
            Change::Suspend => {
                self.edge.ok(&["domain", "resume", DOMAIN_A]);
            }
            Change::AddWildcard => {
                self.edge.ok(&["domain", "rm", WILDCARD]);
            }
            Change::Templates3 | Change::Templates4 => {
                self.edge.write_settings(&self.settings);
                self.edge.ok(&["apply"]);
            }
        }
        self.expect_base("after reverting the change");
    }

    fn expect_base(&self, when: &str) {
        let now = self.snapshot();
        assert_files_eq(&now.files, &self.base.files, &format!("base set {when}"));
        assert_eq!(now.blocked, self.base.blocked, "blocked map files {when}");
        assert_eq!(now.domains, self.base.domains, "domains {when}");
        assert_eq!(now.suspended, self.base.suspended, "suspended {when}");
        assert_eq!(now.blocks, self.base.blocks, "blocks {when}");
        assert_eq!(now.proxies, self.base.proxies, "trusted proxies {when}");
    }

    /// Waits until HAProxy serves the old (`new == false`) or new state of `change`.
    fn expect_routing(&self, change: Change, new: bool, variant: usize, ctx: &str) {
        let edge = &self.edge;
        let a_routed = !(matches!(change, Change::RemoveDomain | Change::Suspend) && new);
        // Removed: unknown host; suspended: the suspended page.
        let not_routed = if change == Change::Suspend { 503 } else { 404 };
        eventually(&format!("{DOMAIN_A} routed: {a_routed} ({ctx})"), || {
            let r = edge.get(DOMAIN_A, "/");
            a_routed == (r.status == 200 && r.body == "A") && (a_routed || r.status == not_routed)
        });
        match change {
            Change::AddDomain => eventually(&format!("{DOMAIN_B} routed: {new} ({ctx})"), || {
                served_b(&edge.get(DOMAIN_B, "/")) == new
            }),
            Change::AddWildcard => {
                eventually(&format!("{UNDER_WILDCARD} routed: {new} ({ctx})"), || {
                    served_b(&edge.get(UNDER_WILDCARD, "/")) == new
                })
            }
            Change::TrustProxy => eventually(&format!("127.0.0.3 trusted: {new} ({ctx})"), || {
                let r = http_get(
                    Some(CLIENT_C),
                    edge.port,
                    DOMAIN_A,
                    "/",
                    &[("X-Forwarded-For", "198.51.100.7")],
                );
                let seen = if new { "198.51.100.7" } else { "127.0.0.3" };
                r.status == 200 && r.seen_real_ip == seen
            }),
            Change::Block => eventually(&format!("127.0.0.3 blocked: {new} ({ctx})"), || {
                let r = edge.get_from(CLIENT_C, DOMAIN_A, "/");
                (r.status == 403) == new && (new || r.status == 200)
            }),
            Change::Templates3 | Change::Templates4 => {
                let marker = format!("crash-suite variant {variant}");
                eventually(
                    &format!("unknown-host page has {marker:?}: {new} ({ctx})"),
                    || {
                        let r = edge.get(UNKNOWN_HOST, "/");
                        r.status == 404 && r.body.contains(&marker) == new
                    },
                )
            }
            Change::RemoveDomain | Change::Suspend => {}
        }
    }

    /// The highest apply id in the history (0 when there is none).
    fn last_apply_id(&self) -> i64 {
        self.applies().iter().map(|a| a.id).max().unwrap_or(0)
    }

    /// The apply history, newest first, read from the database (`status` shows only the
    /// last few).
    fn applies(&self) -> Vec<ApplyRecord> {
        self.store().applies(10_000).unwrap()
    }

    fn store(&self) -> Store {
        let paths = Settings::load(self.edge.state_dir()).unwrap().paths;
        Store::open(&paths.database, &paths.blocks_database).unwrap()
    }
}

fn served_b(r: &Response) -> bool {
    r.status == 200 && r.body == "B"
}

fn block_keys(json: &str) -> BTreeSet<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| format!("{} {}", b["key"], b["reason"]))
        .collect()
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "never true: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Paths whose bytes differ between two sets (present in one only included).
fn differing_paths(a: &FileSet, b: &FileSet) -> Vec<PathBuf> {
    let names = |s: &FileSet| s.iter().map(|(p, _)| p.clone()).collect::<BTreeSet<_>>();
    let bytes = |s: &FileSet, p: &PathBuf| s.iter().find(|(q, _)| q == p).map(|(_, b)| b.clone());
    names(a)
        .union(&names(b))
        .filter(|p| bytes(a, p) != bytes(b, p))
        .cloned()
        .collect()
}

fn assert_files_eq(got: &FileSet, want: &FileSet, what: &str) {
    let differing = differing_paths(got, want);
    assert!(
        differing.is_empty(),
        "{what}: the live set differs in {differing:#?}"
    );
}

/// What the apply marker holds right after a kill at `point`.
fn marker_after(point: &str) -> Option<&'static str> {
    match point {
        "before-snapshot" => None,
        "after-reload" | "before-commit" | "after-commit" => Some("reloading\n"),
        p if p.starts_with("runtime-") => Some("reloading\n"),
        _ => Some("writing\n"),
    }
}

/// Whether HAProxy serves the new state at `point` (the reload or the runtime change
/// happened before it).
fn serves_new_at(point: &str) -> bool {
    matches!(
        point,
        "after-reload" | "before-commit" | "after-commit" | "runtime-servers:after-push"
    )
}

struct Round {
    /// The first kill hits the change's own command; each further one hits the recovery
    /// command (`hapctl apply`) of the kill before it.
    kills: Vec<&'static str>,
    change: Change,
    variant: usize,
}

/// Whether the recovery command itself reaches the apply's crash points after a kill at
/// `point`: only when the killed change is in force (settings) or was committed.
fn recovery_converges(change: Change, point: &str) -> bool {
    !change.in_database() || point == "after-commit"
}

/// One change killed at `round.kills` in turn, then recovered. Returns a line for the log.
fn run_round(fx: &Fixture, round: &Round) -> String {
    let Round {
        ref kills,
        change,
        variant,
    } = *round;
    let edge = &fx.edge;
    for (k, point) in kills.iter().enumerate() {
        assert!(
            if k == 0 {
                change.reaches(point)
            } else {
                change.reload_path_reaches(point)
            },
            "bad plan: {change:?} does not reach {point}"
        );
        assert!(
            k == 0 || recovery_converges(change, kills[0]),
            "bad plan: the recovery after {} has nothing to apply",
            kills[0]
        );
    }
    fx.expect_base("at the start of the round");

    let (new, _) = new_state(fx, change, variant);
    let args = fx.command_args(change);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // The crashes: the change, then (for further kills) the recovery command.
    let before_id = fx.last_apply_id();
    let mut history = Vec::new();
    fx.stage(change, variant);
    for (k, point) in kills.iter().enumerate() {
        let args: &[&str] = if k == 0 { &args } else { &["apply"] };
        let mut cmd = edge.command(args);
        cmd.env("HAPCTL_FAULT", point);
        let out = run_bounded(cmd, Duration::from_secs(60));
        assert_killed(&out, point, change, k);
        if k > 0 && marker_after(kills[k - 1]).is_some() {
            history.push("recovered");
        }
        if *point == "after-commit" {
            // The killed apply's own row was committed with its change.
            history.push("applied");
        }
        let marker = std::fs::read(edge.path("run/apply.pending")).ok();
        assert_eq!(
            marker.as_deref(),
            marker_after(point).map(str::as_bytes),
            "apply marker right after a kill at {point}"
        );
        assert_eq!(
            edge.master_pid(),
            fx.master_pid,
            "HAProxy's master changed with the kill at {point}"
        );
        fx.expect_routing(
            change,
            serves_new_at(point),
            variant,
            &format!("right after the kill at {point}"),
        );
    }

    // The recovery: the next command.
    let recovery = edge.run(&["apply"]);
    let what = format!("after kills at {kills:?} during {change:?}");
    assert_eq!(
        recovery.status.code(),
        Some(0),
        "recovery {what}: {}",
        describe(&recovery)
    );
    let committed = recovery_converges(change, kills[0]);
    let which = check_consistent(fx, change, variant, &new, committed, &what);

    // The history tells what happened: each interrupted apply that had begun writing was
    // recovered, then the recovery command converged (recovery puts the known-good set back,
    // so it writes the new set again when the change is in force).
    if marker_after(kills[kills.len() - 1]).is_some() {
        history.push("recovered");
    }
    history.push(if committed { "applied" } else { "unchanged" });
    let mut rows = fx.applies();
    rows.retain(|a| a.id > before_id);
    rows.sort_by_key(|a| a.id);
    let outcomes: Vec<&str> = rows.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, history, "history rows {what}");

    let summary = format!(
        "{:<28} {change:<13?} -> {which} set; recovery: {}",
        kills.join(" + "),
        String::from_utf8_lossy(&recovery.stdout)
            .lines()
            .next()
            .unwrap_or("")
    );
    if committed {
        fx.revert(change);
    }
    summary
}

/// Makes the change without a fault, records the new state (the exact bytes a successful
/// apply of this change writes) and how long the command took, then undoes it. Done once per
/// change and variant on each edge.
fn new_state(fx: &Fixture, change: Change, variant: usize) -> (Snapshot, Duration) {
    if let Some(known) = fx.new_states.borrow().get(&(change, variant)) {
        return known.clone();
    }
    fx.stage(change, variant);
    let args = fx.command_args(change);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    fx.edge.ok(&args);
    let took = started.elapsed();
    let new = fx.snapshot();
    assert_eq!(
        differing_paths(&fx.base.files, &new.files).len(),
        change.files_changed(),
        "{change:?} changes this many live files"
    );
    assert_eq!(
        new.blocked != fx.base.blocked,
        change == Change::Block,
        "{change:?} changes the blocked maps"
    );
    fx.expect_routing(change, true, variant, "after the change without a fault");
    fx.revert(change);
    fx.new_states
        .borrow_mut()
        .insert((change, variant), (new.clone(), took));
    (new, took)
}

/// Checks a recovered edge: the live set is the new set (`committed`) or the base set byte
/// for byte, HAProxy accepts it and serves it from the same master, the database agrees,
/// nothing is left over. Returns "new" or "old".
fn check_consistent(
    fx: &Fixture,
    change: Change,
    variant: usize,
    new: &Snapshot,
    committed: bool,
    what: &str,
) -> &'static str {
    let edge = &fx.edge;
    let want = if committed { new } else { &fx.base };
    let which = if committed { "new" } else { "old" };
    let now = fx.snapshot();
    assert_files_eq(
        &now.files,
        &want.files,
        &format!("{what} and recovery, the {which} set"),
    );
    assert!(
        edge.live_set_is_valid(),
        "haproxy -c refuses the live set {what}"
    );
    assert_eq!(
        now.domains, want.domains,
        "database domains ({which} state) {what}"
    );
    assert_eq!(
        now.suspended, want.suspended,
        "database suspensions ({which} state) {what}"
    );
    assert_eq!(
        now.blocks, want.blocks,
        "database blocks ({which} state) {what}"
    );
    assert_eq!(
        now.blocked, want.blocked,
        "blocked map files ({which} state) {what}"
    );
    assert_eq!(
        runtime_blocked_keys(edge),
        now.blocked,
        "the worker's blocked maps vs the files ({which} state) {what}"
    );
    assert_eq!(
        now.proxies, want.proxies,
        "database trusted proxies ({which} state) {what}"
    );
    let dry = edge.ok(&["apply", "--dry-run"]);
    assert!(
        dry.contains("no change") && dry.contains("verdict: valid"),
        "the database and the live set disagree {what}: {dry}"
    );
    let proc = edge.show_proc();
    assert_eq!(proc.master.pid, fx.master_pid, "never a restart ({what})");
    assert!(!proc.workers.is_empty(), "a worker serves ({what})");
    let history: Vec<String> = fx
        .applies()
        .iter()
        .take(3)
        .map(|a| format!("{}: {}", a.outcome, a.message))
        .collect();
    fx.expect_routing(
        change,
        committed,
        variant,
        &format!("{what}; last applies, newest first: {history:#?}"),
    );
    let left = leftovers(edge);
    assert!(left.is_empty(), "left over {what}: {left:#?}");
    assert!(
        !edge.path("run/apply.pending").exists(),
        "apply marker left {what}"
    );
    let status: serde_json::Value = serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
    assert_eq!(
        status["live_is_known_good"],
        serde_json::Value::Bool(true),
        "the live set is the known-good snapshot {what}"
    );
    which
}

/// Anything an interrupted apply may leave under the state dir: temp files, temp symlinks and
/// temp folders (`.hapctl-tmp.` anywhere in the name, any file type, any folder).
fn leftovers(edge: &Edge) -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().contains(".hapctl-tmp.") {
                out.push(e.path());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(edge.state_dir(), &mut out);
    out
}

fn assert_killed(out: &Output, point: &str, change: Change, k: usize) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "HAPCTL_FAULT={point} on {} of {change:?} ({} files) must SIGKILL the apply there, \
         but the point was not reached: {}",
        if k == 0 { "the change" } else { "the recovery" },
        change.files_changed(),
        describe(out)
    );
}

/// Kills during the recovery of a kill: the recovery command's own apply is interrupted.
const REPEATED_KILLS: [(Change, &[&str]); 9] = [
    (Change::AddDomain, &["after-commit", "after-reload"]),
    (Change::RemoveDomain, &["after-commit", "write:1"]),
    (Change::TrustProxy, &["after-commit", "before-commit"]),
    (Change::AddWildcard, &["after-commit", "after-commit"]),
    (Change::Templates4, &["write:2", "write:3"]),
    (Change::Templates3, &["after-reload", "before-snapshot"]),
    (Change::Templates4, &["before-reload", "after-commit"]),
    (Change::Templates3, &["after-commit", "after-write"]),
    (
        Change::Templates4,
        &["write:1", "after-reload", "write:3", "after-commit"],
    ),
];

/// The plan: every point, with every change that reaches it (at least `ROUNDS_PER_POINT`
/// times), then the repeated kills; spread over `EDGES` edges.
fn plan() -> Vec<Vec<Round>> {
    let mut rounds = Vec::new();
    for (i, point) in POINTS.iter().enumerate() {
        let eligible: Vec<Change> = ALL_CHANGES
            .into_iter()
            .filter(|c| c.reaches(point))
            .collect();
        assert!(!eligible.is_empty(), "no change reaches {point}");
        for r in 0..ROUNDS_PER_POINT.max(eligible.len()) {
            rounds.push((vec![*point], eligible[(i + r) % eligible.len()]));
        }
    }
    for (change, kills) in REPEATED_KILLS {
        rounds.push((kills.to_vec(), change));
    }
    let mut per_edge: Vec<Vec<Round>> = (0..EDGES).map(|_| Vec::new()).collect();
    for (n, (kills, change)) in rounds.into_iter().enumerate() {
        per_edge[n % EDGES].push(Round {
            kills,
            change,
            // One variant of the template overrides per change, so `new_state` is reused.
            variant: change as usize,
        });
    }
    per_edge
}

#[test]
fn every_crash_point_recovers_to_the_old_or_the_new_set() {
    let started = Instant::now();
    let plan = plan();
    let kills: usize = plan.iter().flatten().map(|r| r.kills.len()).sum();
    for point in POINTS {
        let rounds = plan
            .iter()
            .flatten()
            .filter(|r| r.kills[0] == point)
            .count();
        assert!(rounds >= ROUNDS_PER_POINT, "{point}: {rounds} rounds");
    }
    let used: BTreeSet<String> = plan
        .iter()
        .flatten()
        .map(|r| format!("{:?}", r.change))
        .collect();
    let via_apply = ALL_CHANGES.iter().filter(|c| c.via_apply()).count();
    assert_eq!(
        used.len(),
        via_apply,
        "every change made by an apply is used"
    );

    let recovered = AtomicUsize::new(0);
    let results: Vec<Result<(), String>> = thread::scope(|s| {
        let handles: Vec<_> = plan
            .iter()
            .enumerate()
            .map(|(e, rounds)| {
                let recovered = &recovered;
                s.spawn(move || {
                    let fx = Fixture::new();
                    for (i, round) in rounds.iter().enumerate() {
                        eprintln!(
                            "edge {e} round {i}: kill at {:?} during {:?}",
                            round.kills, round.change
                        );
                        let line = run_round(&fx, round);
                        recovered.fetch_add(round.kills.len(), Ordering::SeqCst);
                        eprintln!("edge {e} round {i}: ok: {line}");
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(panic_message))
            .collect()
    });

    let recovered = recovered.load(Ordering::SeqCst);
    let failures: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter_map(|(e, r)| r.err().map(|msg| format!("edge {e}: {msg}")))
        .collect();
    eprintln!(
        "crash suite: {kills} kills, {recovered} recoveries passed ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(recovered, kills);
}

/// Rounds of the kill-at-any-instant test, and the edges they run on.
const RANDOM_ROUNDS: usize = 16;
const RANDOM_EDGES: usize = 2;

/// A small deterministic generator (xorshift64*), so a failing run can be replayed with
/// `HAPCTL_CRASH_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The change command SIGKILLed at a random instant of its run (not only at the named
/// points: inside an atomic write, the SQLite commit, the known-good promotion...), then
/// `hapctl apply`: the edge must be in the old or the new state, whichever the database
/// holds, with every invariant of the named points.
#[test]
fn a_kill_at_any_instant_recovers_to_the_old_or_the_new_set() {
    let started = Instant::now();
    let seed = std::env::var("HAPCTL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill at any instant: HAPCTL_CRASH_SEED={seed}");
    let killed = AtomicUsize::new(0);
    let rounds_done = AtomicUsize::new(0);
    let results: Vec<Result<(), String>> = thread::scope(|s| {
        let handles: Vec<_> = (0..RANDOM_EDGES)
            .map(|e| {
                let (killed, rounds_done) = (&killed, &rounds_done);
                s.spawn(move || {
                    let mut rng = Rng(seed.wrapping_add(e as u64 * 0x9E37_79B9_7F4A_7C15) | 1);
                    let fx = Fixture::new();
                    for i in 0..RANDOM_ROUNDS / RANDOM_EDGES {
                        let change = ALL_CHANGES[rng.next() as usize % ALL_CHANGES.len()];
                        let variant = 1000 + e * 100 + i;
                        fx.expect_base("at the start of the round");
                        let (new, took) = new_state(&fx, change, variant);
                        // Anywhere from the start of the process to a little after the end
                        // of the apply it would make.
                        let delay = took.mul_f64((rng.next() % 1200) as f64 / 1000.0);
                        fx.stage(change, variant);
                        let args = fx.command_args(change);
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        let mut child = fx
                            .edge
                            .command(&args)
                            .stdout(std::process::Stdio::null())
                            .stderr(std::process::Stdio::null())
                            .spawn()
                            .unwrap();
                        thread::sleep(delay);
                        let _ = child.kill();
                        let status = child.wait().unwrap();
                        let was_killed = {
                            use std::os::unix::process::ExitStatusExt;
                            status.signal() == Some(libc::SIGKILL)
                        };
                        if was_killed {
                            killed.fetch_add(1, Ordering::SeqCst);
                        } else {
                            assert!(status.success(), "{change:?} failed: {status:?}");
                        }
                        let what = format!(
                            "after a kill {:.1} ms into {change:?} (took {:.1} ms unkilled; \
                             killed: {was_killed}; HAPCTL_CRASH_SEED={seed})",
                            delay.as_secs_f64() * 1000.0,
                            took.as_secs_f64() * 1000.0
                        );
                        let recovery = fx.edge.run(&["apply"]);
                        assert_eq!(
                            recovery.status.code(),
                            Some(0),
                            "recovery {what}: {}",
                            describe(&recovery)
                        );
                        // Which state won is up to the instant; the database says which.
                        let db = fx.snapshot();
                        let committed = !change.in_database()
                            || (db.domains == new.domains
                                && db.suspended == new.suspended
                                && db.blocks == new.blocks
                                && db.proxies == new.proxies);
                        let which = check_consistent(&fx, change, variant, &new, committed, &what);
                        eprintln!("edge {e} round {i}: ok: {what} -> {which} set");
                        if committed {
                            fx.revert(change);
                        }
                        rounds_done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(panic_message))
            .collect()
    });
    let failures: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter_map(|(e, r)| r.err().map(|msg| format!("edge {e}: {msg}")))
        .collect();
    eprintln!(
        "crash suite (any instant): {} kills in {RANDOM_ROUNDS} rounds (the other rounds \
         finished first), {} rounds recovered and passed ({:.1} s)",
        killed.load(Ordering::SeqCst),
        rounds_done.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// The instant the random-kill test found: the apply is killed after it sent `reload` to the
/// master and before the reload's outcome. Made deterministic here: kill at `before-reload`,
/// then do what the killed apply did next (marker `reloading`, `reload` on the master socket)
/// and run the recovery while the master is still re-executing. The database and the live
/// files then hold the old state; HAProxy must serve it too.
#[test]
fn a_kill_while_the_reload_is_in_flight_recovers() {
    let fx = Fixture::new();
    let edge = &fx.edge;
    for attempt in 0..5 {
        let args = fx.command_args(Change::AddWildcard);
        let mut cmd = edge.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.env("HAPCTL_FAULT", "before-reload");
        assert_killed(
            &run_bounded(cmd, Duration::from_secs(60)),
            "before-reload",
            Change::AddWildcard,
            0,
        );
        // The killed apply's next two steps.
        std::fs::write(edge.path("run/apply.pending"), "reloading\n").unwrap();
        let socket =
            hapctl::haproxy::CliSocket::new(edge.path("run/master.sock"), Duration::from_secs(5));
        socket.command("reload").unwrap();
        // Killed now; the next command runs while the master re-executes.
        let recovery = edge.run(&["apply"]);
        let what = format!(
            "attempt {attempt}: after a kill between `reload` and its outcome, the recovery said: {}",
            describe(&recovery)
        );
        assert_eq!(recovery.status.code(), Some(0), "{what}");
        // Let any reload still in flight finish, then look at what HAProxy serves.
        thread::sleep(Duration::from_millis(500));
        let rows = fx.applies();
        let what = format!(
            "{what}\nlast history rows: {:#?}",
            rows.iter()
                .take(2)
                .map(|a| format!("{}: {}", a.outcome, a.message))
                .collect::<Vec<_>>()
        );
        let now = fx.snapshot();
        assert_files_eq(&now.files, &fx.base.files, &what);
        assert_eq!(now.domains, fx.base.domains, "{what}");
        assert_eq!(
            edge.get(UNDER_WILDCARD, "/").status,
            404,
            "HAProxy serves {WILDCARD}, which neither the database nor the live files hold: \
             it loaded the killed apply's set and the recovery did not reload it back. {what}"
        );
        assert!(!edge.path("run/apply.pending").exists(), "{what}");
        assert_eq!(edge.master_pid(), fx.master_pid, "{what}");
    }
}

/// What a kill inside an atomic write leaves (seen by the random-kill test: a kill a few ms
/// into `block add` left `run/.apply.pending.hapctl-tmp.<pid>`): a temp file next to the
/// apply marker, a temp symlink next to the known-good link (promotion), temp files next to
/// live files. The next command must sweep them all, not only those next to live files.
#[test]
fn temp_files_of_a_kill_inside_an_atomic_write_are_swept() {
    let fx = Fixture::new();
    let edge = &fx.edge;
    let dead_pid = 999_999_999u32;
    let planted = [
        edge.path(&format!("live/.haproxy.cfg.hapctl-tmp.{dead_pid}")),
        edge.path(&format!("live/maps/.hosts.map.hapctl-tmp.{dead_pid}")),
        edge.path(&format!("run/.apply.pending.hapctl-tmp.{dead_pid}")),
    ];
    for p in &planted {
        std::fs::write(p, "half").unwrap();
    }
    let target = std::fs::read_link(edge.path("known-good")).unwrap();
    std::os::unix::fs::symlink(
        &target,
        edge.path(&format!(".known-good.hapctl-tmp.{dead_pid}")),
    )
    .unwrap();
    // A killed apply that had begun writing, so that the recovery runs in full.
    std::fs::write(edge.path("run/apply.pending"), "writing\n").unwrap();

    edge.ok(&["apply"]);
    let left = leftovers(edge);
    assert!(left.is_empty(), "the recovery left these behind: {left:#?}");
    fx.expect_base("after the recovery");
}

/// Found by the random kills (`block add` killed ~34 ms in): the block fast path commits the
/// database, writes the map files, then changes the running worker through the runtime API. A
/// kill between the files and the runtime API leaves the database and the files saying one
/// thing and HAProxy doing another; the next command must bring HAProxy in line. Made
/// deterministic by producing that state directly: the runtime entry alone is removed (a
/// killed `block add`) or added (a killed `block rm`) on the worker's admin socket, and the
/// block path's `run/blocks.pending` marker is left, as the killed change leaves it.
#[test]
fn a_kill_between_the_block_map_file_and_the_runtime_api_recovers() {
    let fx = Fixture::new();
    let edge = &fx.edge;
    let admin =
        hapctl::haproxy::CliSocket::new(edge.path("run/admin.sock"), Duration::from_secs(5));
    // A block lands in the delta map (the base map is rewritten only by a fold).
    let map = edge.path(BLOCKED_MAPS[1]).display().to_string();
    let blocked = || edge.get_from(CLIENT_C, DOMAIN_A, "/").status == 403;

    // A `block add` killed after the files: blocked in the database and the files, not in
    // HAProxy.
    edge.ok(&["block", "add", "127.0.0.3", "--reason", "crash suite"]);
    assert!(blocked());
    assert_eq!(
        admin.command(&format!("del map {map} 127.0.0.3")).unwrap(),
        "\n"
    );
    std::fs::write(edge.path("run/blocks.pending"), "").unwrap();
    assert!(
        !blocked(),
        "the state a kill between files and runtime API leaves"
    );
    edge.ok(&["apply"]);
    assert!(
        blocked(),
        "after `hapctl apply`, 127.0.0.3 is blocked in the database ({}) and in the map files, \
         but HAProxy lets it through: the recovery trusts the runtime maps to match the files",
        edge.ok(&["block", "ls"]).trim()
    );

    // A `block rm` killed after the files: unblocked in the database and the files, blocked in
    // HAProxy.
    edge.ok(&["block", "rm", "127.0.0.3"]);
    assert!(!blocked());
    assert_eq!(
        admin
            .command(&format!("add map {map} 127.0.0.3 1"))
            .unwrap(),
        "\n"
    );
    std::fs::write(edge.path("run/blocks.pending"), "").unwrap();
    assert!(
        blocked(),
        "the state a kill between files and runtime API leaves"
    );
    edge.ok(&["apply"]);
    assert!(
        !blocked(),
        "after `hapctl apply`, 127.0.0.3 is in neither the database nor the map files, but \
         HAProxy still blocks it"
    );
    fx.expect_base("after the recoveries");
}

/// Every crash point of the block path, in the order a change reaches them: the files and the
/// worker take a change before the database commits it. A block lands in the delta map
/// (`block-after-base` is not on its way); an unblock of a key of the base map rewrites both
/// files (the fold), and passes every point.
const BLOCK_POINTS: [&str; 4] = [
    "block-after-base",
    "block-after-files",
    "block-after-runtime",
    "block-after-commit",
];

/// A block change killed at each of its crash points (`HAPCTL_FAULT`), then the next command:
/// `hapctl apply` (its reconcile) or the next block change (the block path's own recovery).
/// Killed before its commit, the change is not in the database and must be gone from the
/// files, the worker's maps and what HAProxy enforces; killed after it, it must be in all of
/// them. No marker and no temp file is left.
#[test]
fn every_block_crash_point_recovers_to_the_committed_blocks() {
    let fx = Fixture::new();
    let edge = &fx.edge;
    let blocked = || edge.get_from(CLIENT_C, DOMAIN_A, "/").status == 403;
    let mut rounds = 0;
    for point in BLOCK_POINTS {
        // (change, whether it blocks 127.0.0.3, whether it reaches the point)
        let changes: [(&[&str], bool, bool); 2] = [
            (
                &["block", "add", "127.0.0.3", "--reason", "crash suite"],
                true,
                point != "block-after-base",
            ),
            (&["block", "rm", "127.0.0.3"], false, true),
        ];
        for (args, blocks, reaches) in changes {
            if !reaches {
                continue;
            }
            // Whether the database blocks 127.0.0.3 after the kill: the change only once
            // committed.
            let held = if point == "block-after-commit" {
                blocks
            } else {
                !blocks
            };
            for recovery in ["apply", "next block"] {
                if !blocks {
                    // The key to remove sits in the base map: added, then folded by a sync.
                    edge.ok(&["block", "add", "127.0.0.3", "--reason", "crash suite"]);
                    edge.ok(&["block", "sync"]);
                }
                let what = format!("{args:?} killed at {point}, recovered by {recovery}");
                let mut cmd = edge.command(args);
                cmd.env("HAPCTL_FAULT", point);
                let out = run_bounded(cmd, Duration::from_secs(60));
                {
                    use std::os::unix::process::ExitStatusExt;
                    assert_eq!(
                        out.status.signal(),
                        Some(libc::SIGKILL),
                        "{what}: the point was not reached: {}",
                        describe(&out)
                    );
                }
                assert!(
                    edge.path("run/blocks.pending").exists(),
                    "{what}: the marker is left"
                );
                match recovery {
                    "apply" => {
                        edge.ok(&["apply"]);
                    }
                    _ => {
                        edge.ok(&["block", "add", "127.0.0.4"]);
                        edge.ok(&["block", "rm", "127.0.0.4"]);
                    }
                }
                let db = block_keys(&edge.ok(&["block", "ls", "--json"]));
                assert_eq!(
                    db.iter().any(|k| k.contains("127.0.0.3")),
                    held,
                    "{what}: the database holds the change once committed"
                );
                let want: BTreeSet<String> = if held {
                    ["127.0.0.3".to_string()].into()
                } else {
                    BTreeSet::new()
                };
                assert_eq!(blocked_map_file_keys(edge), want, "{what}: map files");
                assert_eq!(
                    runtime_blocked_keys(edge),
                    want,
                    "{what}: the worker's maps"
                );
                assert_eq!(blocked(), held, "{what}: what HAProxy enforces");
                assert!(
                    !edge.path("run/blocks.pending").exists(),
                    "{what}: marker left"
                );
                let left = leftovers(edge);
                assert!(left.is_empty(), "{what}: left over {left:#?}");
                if held {
                    edge.ok(&["block", "rm", "127.0.0.3"]);
                }
                fx.expect_base(&format!("after {what}"));
                rounds += 1;
            }
        }
    }
    assert_eq!(
        rounds, 14,
        "every point with every change that reaches it, both recoveries"
    );
}
