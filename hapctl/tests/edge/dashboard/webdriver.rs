//! A headless Chromium driven through chromedriver's W3C WebDriver HTTP API, with the test
//! harness's own HTTP client: Debian's `chromium` and `chromium-driver`
//! (scripts/ensure-test-tools.sh installs them), nothing downloaded. Chromedriver leads its own
//! process group, so dropping the [`Browser`] stops it and every Chromium process, also when
//! the test panicked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use testkit::{free_port, http};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long a step may take to show in the page.
pub const WAIT: Duration = Duration::from_secs(20);

pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
    shots: PathBuf,
}

fn need(path: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing: the dashboard suite needs Debian's chromium and chromium-driver \
         (scripts/ensure-test-tools.sh installs them)"
    );
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width`×`height`; screenshots go to
    /// `target/dashboard-screenshots/`.
    pub fn start(width: u32, height: u32) -> Browser {
        need(CHROMIUM);
        need(CHROMEDRIVER);
        use std::os::unix::process::CommandExt;
        let port = free_port();
        let profile = tempfile::tempdir().unwrap();
        // Chromium's crash handler leaves the process group; with HOME in the profile its
        // command line names the profile, which is how Drop finds it.
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .env("HOME", profile.path())
            .env("XDG_CONFIG_HOME", profile.path().join("config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
            shots,
        };
        let deadline = Instant::now() + WAIT;
        while !browser
            .request("GET", "/status", None)
            .is_ok_and(|v| v["ready"] == true)
        {
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            thread::sleep(Duration::from_millis(50));
        }
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-gpu".into(),
            "--no-first-run".into(),
            "--disable-extensions".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            format!("--user-data-dir={}", browser._profile.path().display()),
            format!("--window-size={width},{height}"),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}});
        let created = browser
            .request("POST", "/session", Some(&caps))
            .unwrap_or_else(|e| panic!("no browser session: {e}"));
        browser.session = created["sessionId"].as_str().unwrap().to_string();
        browser
    }

    /// One WebDriver command; `Err` with the driver's message when it refuses.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let body = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let (status, text) = exchange(self.port, method, path, &body)?;
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status != 200 {
            return Err(format!("{method} {path}: {status} {text}"));
        }
        Ok(json["value"].clone())
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.request(method, &path, body.as_ref())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) and returns its value.
    pub fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Runs an async script: its last argument is the callback to call with the result.
    pub fn js_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.command(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Waits until `script` returns a truthy value; panics naming `what` and the last value.
    pub fn wait_js(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        self.try_wait_js(script, args).unwrap_or_else(|last| {
            self.screenshot("failure");
            panic!("the page never showed {what} (last: {last}); screenshot failure.png")
        })
    }

    /// `wait_js` that returns the last falsy value instead of panicking after `WAIT`.
    pub fn try_wait_js(&self, script: &str, args: Vec<Value>) -> Result<Value, Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.js(script, args.clone());
            let truthy = !(v.is_null()
                || v == false
                || v == ""
                || v == 0
                || v.as_array().is_some_and(Vec::is_empty));
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(v);
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a visible element matching `css` whose text contains `text`; returns its text.
    pub fn wait_text(&self, css: &str, text: &str) -> String {
        let v = self.wait_js(
            &format!("{text:?} in {css}"),
            "return [...document.querySelectorAll(arguments[0])].filter(e => e.offsetParent !== null || e === document.body).map(e => e.textContent).find(t => t.includes(arguments[1])) || null",
            vec![json!(css), json!(text)],
        );
        v.as_str().unwrap_or_default().to_string()
    }

    fn element(&self, css: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self.request(
                "POST",
                &format!("/session/{}/element", self.session),
                Some(&json!({"using": "css selector", "value": css})),
            );
            if let Ok(v) = found {
                if let Some(id) = v.as_object().and_then(|o| o.values().next()) {
                    return id.as_str().unwrap().to_string();
                }
            }
            if Instant::now() > deadline {
                self.screenshot("failure");
                panic!("no element {css} in the page; screenshot failure.png");
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Clicks like a person (scrolled to the middle of the window; a hidden one is an error).
    /// A live update may redraw the element between finding and clicking it: then it is found
    /// again.
    pub fn click(&self, css: &str) {
        for _ in 0..5 {
            let id = self.element(css);
            // In the middle of the window: the driver's own scrolling can leave it under the
            // sticky header.
            let element = json!({"element-6066-11e4-a52e-4f735466cecf": id});
            let center = "arguments[0].scrollIntoView({block: 'center'})";
            let script = json!({"script": center, "args": [element]});
            let execute = format!("/session/{}/execute/sync", self.session);
            if let Err(e) = self.request("POST", &execute, Some(&script)) {
                if e.contains("stale element reference") {
                    continue;
                }
                panic!("{e}");
            }
            let path = format!("/session/{}/element/{id}/click", self.session);
            match self.request("POST", &path, Some(&json!({}))) {
                Err(e) if e.contains("stale element reference") => continue,
                done => return drop(done.unwrap_or_else(|e| panic!("{e}"))),
            }
        }
        panic!("{css} was redrawn five times in a row");
    }

    /// Clears a field and types `text` into it, key by key.
    pub fn fill(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.command("POST", &format!("/element/{id}/clear"), Some(json!({})));
        self.keys(css, text);
    }

    /// Types `text` (WebDriver key codes allowed, e.g. "\u{E007}" for Enter) into `css`.
    pub fn keys(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.command(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        );
    }

    /// Keys sent to whatever has the focus (Tab, Enter…).
    pub fn press(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                let k = c.to_string();
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        self.command(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        );
    }

    /// The browser's cookies, HttpOnly ones included (WebDriver sees them; pages do not).
    pub fn cookies(&self) -> Vec<Value> {
        self.command("GET", "/cookie", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn resize(&self, width: u32, height: u32) {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }

    /// Saves a PNG of the viewport as `target/dashboard-screenshots/<name>.png`.
    pub fn screenshot(&self, name: &str) {
        use base64::Engine;
        let Ok(v) = self.request(
            "GET",
            &format!("/session/{}/screenshot", self.session),
            None,
        ) else {
            return;
        };
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap_or_default();
        let _ = std::fs::write(self.shots.join(format!("{name}.png")), png);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.request("DELETE", &format!("/session/{}", self.session), None);
        }
        // The whole group: chromedriver and any Chromium it left; then what left the group.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
        let mark = self._profile.path().display().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&mark) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// One HTTP/1.1 exchange with chromedriver, which answers `Connection: close` but keeps the
/// connection open: the answer ends with its `Content-Length`. Every step has a timeout.
fn exchange(port: u16, method: &str, path: &str, body: &[u8]) -> Result<(u16, String), String> {
    let fail = |e: String| format!("chromedriver {method} {path}: {e}");
    let stream = http::connect(None, port).map_err(fail)?;
    let host = format!("127.0.0.1:{port}");
    let headers = [("Content-Type", "application/json")];
    let raw = http::raw_request(method, path, &host, &headers, Some(body));
    let answer = http::exchange(stream, &raw, Duration::from_secs(90)).map_err(fail)?;
    Ok((answer.status, answer.text()))
}
