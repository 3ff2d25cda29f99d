//! The schema of both database files, as migrations: each entry takes a file from
//! `PRAGMA user_version` N to N + 1, applied in one transaction when the file is opened.

/// Each entry migrates the schema from version `index` to `index + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE domains (
    name TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE servers (
    domain TEXT NOT NULL REFERENCES domains(name) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    addr TEXT NOT NULL,
    weight INTEGER,
    maxconn INTEGER,
    check_enabled INTEGER NOT NULL,
    PRIMARY KEY (domain, position)
);
CREATE TABLE trusted_proxies (
    net TEXT PRIMARY KEY
);
CREATE TABLE applies (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at_ms INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    trigger TEXT NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT NOT NULL,
    checks INTEGER NOT NULL,
    reloads INTEGER NOT NULL,
    changed_files TEXT NOT NULL
);
"#,
    r#"
ALTER TABLE domains ADD COLUMN app TEXT;
CREATE TABLE generations (
    app TEXT NOT NULL,
    version TEXT NOT NULL,
    port INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (app, version)
);
CREATE TABLE app_state (
    app TEXT PRIMARY KEY,
    current TEXT,
    previous TEXT,
    updated_at INTEGER NOT NULL
);
CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app TEXT NOT NULL,
    kind TEXT NOT NULL,
    from_version TEXT,
    to_version TEXT NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    steps TEXT NOT NULL
);
"#,
    r#"
CREATE TABLE https_policies (
    domain TEXT PRIMARY KEY,
    policy TEXT NOT NULL
);
CREATE TABLE certificates (
    name TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    names TEXT NOT NULL,
    chain_pem TEXT NOT NULL,
    not_before INTEGER NOT NULL,
    not_after INTEGER NOT NULL,
    serial TEXT NOT NULL,
    issuer TEXT NOT NULL,
    next_renewal INTEGER,
    last_error TEXT,
    failures INTEGER NOT NULL DEFAULT 0,
    retry_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
"#,
    r#"
ALTER TABLE trusted_proxies ADD COLUMN preset TEXT;
"#,
    r#"
CREATE TABLE suspended_domains (
    domain TEXT PRIMARY KEY,
    since INTEGER NOT NULL
);
"#,
    super::limits::MIGRATION,
    super::profiles::MIGRATION,
    super::ids::MIGRATION,
    // Server options beyond weight/maxconn/check, in `ServerOptions::to_text` form.
    "ALTER TABLE servers ADD COLUMN extra_options TEXT NOT NULL DEFAULT '';",
    // Per-request SSE routing to the domain's long-lived twin backend (0 off, 1 on).
    "ALTER TABLE domains ADD COLUMN sse_routing INTEGER NOT NULL DEFAULT 0;",
    // Why each reload of an apply was made, one `kind: detail` per line.
    "ALTER TABLE applies ADD COLUMN reload_reasons TEXT NOT NULL DEFAULT '';",
    super::placement::MIGRATION,
    super::waf::MIGRATION,
    super::history::MIGRATION,
    super::labels::MIGRATION,
    super::fleet::MIGRATION,
    super::fleet::PEERS_MIGRATION,
    super::serial::MIGRATION,
];

/// Blocks live in their own database file: a block is committed while an apply holds the main
/// database's write transaction across a reload, and must not wait for it.
pub(super) const BLOCK_MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE blocks (
    key TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    author TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
"#,
    super::ids::BLOCK_MIGRATION,
    super::blocks::MIGRATION,
];
