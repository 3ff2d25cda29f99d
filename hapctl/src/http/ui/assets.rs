//! The dashboard's files, embedded at build time from `hapctl/ui/`.

pub struct Asset {
    pub path: &'static str,
    pub mime: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! assets {
    ($($path:literal => $mime:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            mime: $mime,
            bytes: include_bytes!(concat!("../../../ui/", $path)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every served file (`""` is `/ui/` itself).
static ASSETS: &[Asset] = assets![
    "index.html" => "text/html; charset=utf-8",
    "style.css" => "text/css; charset=utf-8",
    "js/api.js" => JS,
    "js/app.js" => JS,
    "js/dom.js" => JS,
    "js/charts.js" => JS,
    "js/format.js" => JS,
    "js/live.js" => JS,
    "js/pages/overview.js" => JS,
    "js/pages/domains.js" => JS,
    "js/pages/blocks.js" => JS,
    "js/pages/certificates.js" => JS,
    "js/pages/protections.js" => JS,
    "js/pages/protect-edit.js" => JS,
    "js/pages/protect-waf.js" => JS,
    "js/pages/protect-waf-trial.js" => JS,
    "js/pages/protect-proxies.js" => JS,
    "js/pages/deliveries.js" => JS,
    "js/pages/applies.js" => JS,
    "js/pages/audit.js" => JS,
    "js/pages/logs.js" => JS,
    "js/pages/traffic.js" => JS,
];

/// The file served at `/ui/<path>`.
pub fn find(path: &str) -> Option<&'static Asset> {
    let path = if path.is_empty() { "index.html" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// A file added to `hapctl/ui/` but not to the table would be a 404 in the browser.
    #[test]
    fn every_file_of_the_ui_folder_is_served() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path.strip_prefix(&root).unwrap().display().to_string();
                if rel == "tests" {
                    continue; // the client-side unit tests (node --test), not served
                }
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    found.push(rel);
                }
            }
        }
        found.sort();
        let mut listed: Vec<String> = super::ASSETS.iter().map(|a| a.path.to_string()).collect();
        listed.sort();
        assert_eq!(found, listed);
        assert_eq!(super::find("").unwrap().path, "index.html");
        assert!(super::find("../Cargo.toml").is_none());
        assert!(super::ASSETS.iter().all(|a| !a.mime.is_empty()
            && (a.path.ends_with(".js") == a.mime.starts_with("text/javascript"))));
    }
}
