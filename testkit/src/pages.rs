//! The pages HAProxy answers itself: what a themed page must carry, and the access-log line of
//! the same request (written by `hapctl serve`'s receiver).

use std::thread;
use std::time::{Duration, Instant};

use super::{Edge, Response};

/// Checks that `r` is a themed page: `status`, HTML, `text` in the body, the request id of the
/// `X-Request-Id` header filled in. Returns that id.
pub fn themed_page(r: &Response, status: u16, text: &str) -> String {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(
        r.header("content-type"),
        Some("text/html; charset=utf-8"),
        "{r:?}"
    );
    let id = r.header("x-request-id").unwrap_or("").to_string();
    assert!(
        id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
        "request id {id:?} in {r:?}"
    );
    assert!(r.body.contains(text), "{text:?} not in {}", r.body);
    assert!(
        r.body.contains(&format!("<code>{id}</code>")),
        "the page shows the id {id}: {}",
        r.body
    );
    assert!(!r.body.contains("%["), "unfilled: {}", r.body);
    id
}

/// The access-log line of request `id`, waited for (the receiver flushes within ~0.3 s).
pub fn log_line(edge: &Edge, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(edge.path("logs/access.log")).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["id"] == id);
        if let Some(line) = found {
            return line;
        }
        assert!(Instant::now() < deadline, "no log line with id {id}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Points `render.templates_dir` at `templates/` in the state dir and writes `name` there.
pub fn override_template(edge: &Edge, name: &str, text: &str) {
    let dir = edge.path("templates");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
    let settings = edge.settings_text();
    if settings.contains("# templates_dir = \"templates\"") {
        edge.write_settings(&settings.replace(
            "# templates_dir = \"templates\"",
            "templates_dir = \"templates\"",
        ));
    }
}
