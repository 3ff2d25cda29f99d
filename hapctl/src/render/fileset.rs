//! The fixed set of files HAProxy reads, each with a stable id.

use std::path::{Path, PathBuf};

use crate::settings::Paths;

/// One file of the set. The id's `name` is also its path inside the known-good snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileId {
    Config,
    Generation,
    HostsMap,
    WildcardsMap,
    BlockedMap,
    /// The blocks since `BlockedMap` was last written in full (see `crate::blocks`).
    BlockedDeltaMap,
    TrustedProxies,
    UnknownHostPage,
    BlockedPage,
    HttpsMap,
    HttpsWildcardsMap,
    AcmeMap,
    CrtList,
    SuspendedMap,
    SuspendedWildcardsMap,
    SuspendedPage,
    LimitsMap,
    LimitsWildcardsMap,
    ExemptMap,
    ProfilesMap,
    ProfilesWildcardsMap,
    LimitedPage,
    DeniedPage,
    SseMap,
    NotConfiguredPage,
    /// Web application firewall policies per domain (docs/waf.md), and their wildcards.
    WafMap,
    WafWildcardsMap,
    /// The SPOE configuration of hapctl's WAF agent (`filter spoe … config`).
    WafSpoe,
    WafBlockedPage,
    WafUnavailablePage,
}

impl FileId {
    /// The mode of a new file: haproxy.cfg is 0600 (it holds the QUIC cluster secret, and only
    /// the master, as root, reads it); the maps and pages 0644.
    pub fn mode(self) -> u32 {
        match self {
            FileId::Config => 0o600,
            _ => crate::fsutil::DEFAULT_MODE,
        }
    }

    pub const ALL: [FileId; 30] = [
        FileId::Config,
        FileId::Generation,
        FileId::HostsMap,
        FileId::WildcardsMap,
        FileId::BlockedMap,
        FileId::BlockedDeltaMap,
        FileId::TrustedProxies,
        FileId::UnknownHostPage,
        FileId::BlockedPage,
        FileId::HttpsMap,
        FileId::HttpsWildcardsMap,
        FileId::AcmeMap,
        FileId::CrtList,
        FileId::SuspendedMap,
        FileId::SuspendedWildcardsMap,
        FileId::SuspendedPage,
        FileId::LimitsMap,
        FileId::LimitsWildcardsMap,
        FileId::ExemptMap,
        FileId::ProfilesMap,
        FileId::ProfilesWildcardsMap,
        FileId::LimitedPage,
        FileId::DeniedPage,
        FileId::SseMap,
        FileId::NotConfiguredPage,
        FileId::WafMap,
        FileId::WafWildcardsMap,
        FileId::WafSpoe,
        FileId::WafBlockedPage,
        FileId::WafUnavailablePage,
    ];

    /// The files the apply renders, compares, snapshots and restores. Not the blocked maps,
    /// which the block path owns (see `crate::blocks`), nor the ACME token map and the
    /// crt-list, which the certificate path owns (see `crate::tls`): each is rewritten from the
    /// database by its owner, never restored to an older copy.
    pub const RENDERED: [FileId; 26] = [
        FileId::Config,
        FileId::Generation,
        FileId::HostsMap,
        FileId::WildcardsMap,
        FileId::TrustedProxies,
        FileId::UnknownHostPage,
        FileId::BlockedPage,
        FileId::HttpsMap,
        FileId::HttpsWildcardsMap,
        FileId::SuspendedMap,
        FileId::SuspendedWildcardsMap,
        FileId::SuspendedPage,
        FileId::LimitsMap,
        FileId::LimitsWildcardsMap,
        FileId::ExemptMap,
        FileId::ProfilesMap,
        FileId::ProfilesWildcardsMap,
        FileId::LimitedPage,
        FileId::DeniedPage,
        FileId::SseMap,
        FileId::NotConfiguredPage,
        FileId::WafMap,
        FileId::WafWildcardsMap,
        FileId::WafSpoe,
        FileId::WafBlockedPage,
        FileId::WafUnavailablePage,
    ];

    /// Rendered maps that the running worker can take through the runtime API: an apply that
    /// changes only these needs no reload.
    pub const RUNTIME_MAPS: [FileId; 11] = [
        FileId::HttpsMap,
        FileId::HttpsWildcardsMap,
        FileId::SuspendedMap,
        FileId::SuspendedWildcardsMap,
        FileId::LimitsMap,
        FileId::LimitsWildcardsMap,
        FileId::ExemptMap,
        FileId::ProfilesMap,
        FileId::ProfilesWildcardsMap,
        FileId::WafMap,
        FileId::WafWildcardsMap,
    ];

    /// Stable relative name, used for the snapshot layout and in messages.
    pub fn name(self) -> &'static str {
        match self {
            FileId::Config => "haproxy.cfg",
            FileId::Generation => "generation.cfg",
            FileId::HostsMap => "maps/hosts.map",
            FileId::WildcardsMap => "maps/wildcards.map",
            FileId::BlockedMap => "maps/blocked.map",
            FileId::BlockedDeltaMap => "maps/blocked-delta.map",
            FileId::TrustedProxies => "maps/trusted-proxies.acl",
            FileId::UnknownHostPage => "pages/unknown-host.html",
            FileId::BlockedPage => "pages/blocked.html",
            FileId::HttpsMap => "maps/https.map",
            FileId::HttpsWildcardsMap => "maps/https-wildcards.map",
            FileId::AcmeMap => "maps/acme-challenges.map",
            FileId::CrtList => "certs/crt-list",
            FileId::SuspendedMap => "maps/suspended.map",
            FileId::SuspendedWildcardsMap => "maps/suspended-wildcards.map",
            FileId::SuspendedPage => "pages/suspended.html",
            FileId::LimitsMap => "maps/limits.map",
            FileId::LimitsWildcardsMap => "maps/limits-wildcards.map",
            FileId::ExemptMap => "maps/limits-exempt.map",
            FileId::ProfilesMap => "maps/profiles.map",
            FileId::ProfilesWildcardsMap => "maps/profiles-wildcards.map",
            FileId::LimitedPage => "pages/limited.html",
            FileId::DeniedPage => "pages/denied.html",
            FileId::SseMap => "maps/sse.map",
            FileId::NotConfiguredPage => "pages/not-configured.html",
            FileId::WafMap => "maps/waf.map",
            FileId::WafWildcardsMap => "maps/waf-wildcards.map",
            FileId::WafSpoe => "waf-spoe.conf",
            FileId::WafBlockedPage => "pages/waf-blocked.html",
            FileId::WafUnavailablePage => "pages/waf-unavailable.html",
        }
    }

    /// Where HAProxy reads it, from the settings.
    pub fn path(self, paths: &Paths) -> PathBuf {
        match self {
            FileId::Config => paths.config.clone(),
            FileId::Generation => paths.generation.clone(),
            FileId::HostsMap => paths.maps_dir.join("hosts.map"),
            FileId::WildcardsMap => paths.maps_dir.join("wildcards.map"),
            FileId::BlockedMap => paths.maps_dir.join("blocked.map"),
            FileId::BlockedDeltaMap => paths.maps_dir.join("blocked-delta.map"),
            FileId::TrustedProxies => paths.maps_dir.join("trusted-proxies.acl"),
            FileId::UnknownHostPage => paths.pages_dir.join("unknown-host.html"),
            FileId::BlockedPage => paths.pages_dir.join("blocked.html"),
            FileId::HttpsMap => paths.maps_dir.join("https.map"),
            FileId::HttpsWildcardsMap => paths.maps_dir.join("https-wildcards.map"),
            FileId::AcmeMap => paths.maps_dir.join("acme-challenges.map"),
            FileId::CrtList => paths.certs_dir.join("crt-list"),
            FileId::SuspendedMap => paths.maps_dir.join("suspended.map"),
            FileId::SuspendedWildcardsMap => paths.maps_dir.join("suspended-wildcards.map"),
            FileId::SuspendedPage => paths.pages_dir.join("suspended.html"),
            FileId::LimitsMap => paths.maps_dir.join("limits.map"),
            FileId::LimitsWildcardsMap => paths.maps_dir.join("limits-wildcards.map"),
            FileId::ExemptMap => paths.maps_dir.join("limits-exempt.map"),
            FileId::ProfilesMap => paths.maps_dir.join("profiles.map"),
            FileId::ProfilesWildcardsMap => paths.maps_dir.join("profiles-wildcards.map"),
            FileId::LimitedPage => paths.pages_dir.join("limited.html"),
            FileId::DeniedPage => paths.pages_dir.join("denied.html"),
            FileId::SseMap => paths.maps_dir.join("sse.map"),
            FileId::NotConfiguredPage => paths.pages_dir.join("not-configured.html"),
            FileId::WafMap => paths.maps_dir.join("waf.map"),
            FileId::WafWildcardsMap => paths.maps_dir.join("waf-wildcards.map"),
            // Beside haproxy.cfg (the Debian layout: /etc/haproxy/waf-spoe.conf).
            FileId::WafSpoe => paths.config.with_file_name("waf-spoe.conf"),
            FileId::WafBlockedPage => paths.pages_dir.join("waf-blocked.html"),
            FileId::WafUnavailablePage => paths.pages_dir.join("waf-unavailable.html"),
        }
    }

    /// The template it is rendered from, if it is not plain data.
    pub fn template(self) -> Option<&'static str> {
        match self {
            FileId::Config => Some("haproxy.cfg.j2"),
            FileId::Generation => Some("generation.cfg.j2"),
            FileId::UnknownHostPage => Some("unknown-host.html.j2"),
            FileId::BlockedPage => Some("blocked.html.j2"),
            FileId::SuspendedPage => Some("suspended.html.j2"),
            FileId::LimitedPage => Some("limited.html.j2"),
            FileId::DeniedPage => Some("denied.html.j2"),
            FileId::NotConfiguredPage => Some("not-configured.html.j2"),
            FileId::WafSpoe => Some("waf-spoe.conf.j2"),
            FileId::WafBlockedPage => Some("waf-blocked.html.j2"),
            FileId::WafUnavailablePage => Some("waf-unavailable.html.j2"),
            FileId::HostsMap
            | FileId::WildcardsMap
            | FileId::BlockedMap
            | FileId::BlockedDeltaMap
            | FileId::TrustedProxies
            | FileId::HttpsMap
            | FileId::HttpsWildcardsMap
            | FileId::AcmeMap
            | FileId::CrtList
            | FileId::SuspendedMap
            | FileId::SuspendedWildcardsMap
            | FileId::LimitsMap
            | FileId::LimitsWildcardsMap
            | FileId::ExemptMap
            | FileId::ProfilesMap
            | FileId::ProfilesWildcardsMap
            | FileId::SseMap
            | FileId::WafMap
            | FileId::WafWildcardsMap => None,
        }
    }
}

/// One rendered file: where it goes and its exact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetFile {
    pub id: FileId,
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// A complete set of files, in `FileId` order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSet {
    files: Vec<SetFile>,
}

impl FileSet {
    pub fn insert(&mut self, id: FileId, path: PathBuf, bytes: Vec<u8>) {
        self.files.retain(|f| f.id != id);
        self.files.push(SetFile { id, path, bytes });
        self.files.sort_by_key(|f| f.id);
    }

    pub fn files(&self) -> &[SetFile] {
        &self.files
    }

    pub fn into_files(self) -> Vec<SetFile> {
        self.files
    }

    pub fn get(&self, id: FileId) -> Option<&SetFile> {
        self.files.iter().find(|f| f.id == id)
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Paths given to `haproxy -f`, in order: the main config, then the generation file.
    pub fn config_paths(&self) -> Vec<&Path> {
        [FileId::Config, FileId::Generation]
            .into_iter()
            .filter_map(|id| self.get(id).map(|f| f.path.as_path()))
            .collect()
    }
}
