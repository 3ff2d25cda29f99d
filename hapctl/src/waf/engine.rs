//! One libmodsecurity engine and its rule set (hapctl's base, then the CRS), and the
//! evaluation of one request against them.
//!
//! The rule engine runs in `DetectionOnly`: libmodsecurity never decides. Every rule that
//! matched is collected from the log callback and the agent scores them under the domain's
//! policy (`verdict.rs`), which is how exclusions and thresholds stay per domain with one
//! loaded rule set. The paranoia level is per request: it travels in the transaction id,
//! which only the agent sets, and a hapctl rule copies it into `tx.paranoia_level` before
//! the CRS initialises (CRS keeps a value that is already set).

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::Mutex;

use super::ffi::{self, Api, LoadError};
use super::matches::RuleMatch;

/// hapctl's engine settings, in front of the CRS (templates/waf/modsecurity.conf).
pub(super) const BASE: &str = include_str!("../../templates/waf/modsecurity.conf");
/// hapctl's rules after the CRS (templates/waf/after-crs.conf).
pub(super) const AFTER: &str = include_str!("../../templates/waf/after-crs.conf");

/// libmodsecurity's rules parser keeps global state: two loads at once corrupt each other
/// (measured: random syntax errors with two threads), so loads take turns.
static PARSER: Mutex<()> = Mutex::new(());

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("the rules were refused by libmodsecurity: {0}")]
    Rules(String),
    #[error(
        "the CRS loader {0} does not exist; install Debian's modsecurity-crs or set [waf] crs"
    )]
    NoCrs(String),
    #[error("libmodsecurity failed at {0}")]
    Step(&'static str),
}

/// What the engine needs to know of a request (the body already cut to the domain's limit).
pub struct Request<'a> {
    pub id: &'a str,
    pub client_ip: &'a str,
    pub client_port: u16,
    pub method: &'a str,
    /// Path and query as sent (`/a?b=c`).
    pub uri: &'a str,
    /// `1.1`, `2.0`.
    pub version: &'a str,
    pub headers: &'a [(Vec<u8>, Vec<u8>)],
    pub body: &'a [u8],
}

pub struct Engine {
    api: &'static Api,
    msc: *mut c_void,
    rules: *mut c_void,
    version: String,
    /// What libmodsecurity counted when it loaded them.
    loaded: usize,
}

// SAFETY: the ModSecurity instance and its rule set are read-only once loaded; libmodsecurity
// creates one Transaction per request and those are used by one thread each (evaluate).
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

impl Engine {
    /// Loads hapctl's base and the CRS through `crs_loader` (Debian's owasp-crs.load).
    pub fn load(crs_loader: &Path) -> Result<Engine, EngineError> {
        let loader = std::fs::read_to_string(crs_loader)
            .map_err(|_| EngineError::NoCrs(crs_loader.display().to_string()))?;
        let crs = without_include_optional(&loader);
        Engine::from_rules(&format!("{BASE}\n{crs}\n{AFTER}"))
    }

    /// An engine from rules text (the tests' own small sets).
    pub fn from_rules(text: &str) -> Result<Engine, EngineError> {
        let api = ffi::api()?;
        let text = CString::new(text).map_err(|_| EngineError::Rules("NUL byte".into()))?;
        let _parser = PARSER.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: msc_init has no preconditions; the pointers live until Drop.
        let msc = unsafe { (api.init)() };
        let mut engine = Engine {
            api,
            msc,
            // SAFETY: as above.
            rules: unsafe { (api.create_rules_set)() },
            version: String::new(),
            loaded: 0,
        };
        let connector = CString::new("hapctl-waf").expect("no NUL");
        // SAFETY: live instance, valid C strings, a callback that never unwinds.
        unsafe {
            (api.set_connector_info)(msc, connector.as_ptr());
            (api.set_log_cb)(msc, Some(collect_log));
        }
        let mut error: *const c_char = std::ptr::null();
        // SAFETY: live rule set, valid C string, out-pointer for the error.
        let n = unsafe { (api.rules_add)(engine.rules, text.as_ptr(), &mut error) };
        if n < 0 {
            // SAFETY: on failure the library strdup'ed the message for us to free.
            let message = unsafe { ffi::take_c_string(error.cast_mut()) };
            return Err(EngineError::Rules(
                message.unwrap_or_default().trim().to_string(),
            ));
        }
        engine.loaded = n as usize;
        // SAFETY: live instance; the string is static inside the library.
        engine.version = unsafe { CStr::from_ptr((api.who_am_i)(msc)) }
            .to_string_lossy()
            .into_owned();
        Ok(engine)
    }

    /// `ModSecurity v3.0.9 (Linux)`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The number of rules libmodsecurity loaded (its own count, chained parts included).
    pub fn rules_loaded(&self) -> usize {
        self.loaded
    }

    /// Runs phases 1 and 2 for `req` at `paranoia` (1–4); the rules that matched, in order.
    pub fn evaluate(&self, req: &Request<'_>, paranoia: u8) -> Result<Vec<RuleMatch>, EngineError> {
        let mut lines: Vec<String> = Vec::new();
        let id = transaction_id(req.id, paranoia);
        let c = |s: &str| CString::new(s.replace('\0', "")).expect("NUL removed");
        let (ip, uri, method, version) =
            (c(req.client_ip), c(req.uri), c(req.method), c(req.version));
        let server = c("127.0.0.1");
        let api = self.api;
        // SAFETY: live engine and rules; `lines` outlives the transaction (cleaned up below),
        // and only this thread runs it, so the callback's pointer stays valid and exclusive.
        unsafe {
            let tx = (api.new_transaction_with_id)(
                self.msc,
                self.rules,
                id.as_ptr().cast_mut(),
                (&mut lines as *mut Vec<String>).cast(),
            );
            if tx.is_null() {
                return Err(EngineError::Step("new transaction"));
            }
            let steps = (|| {
                step(
                    (api.process_connection)(
                        tx,
                        ip.as_ptr(),
                        req.client_port.into(),
                        server.as_ptr(),
                        0,
                    ),
                    "connection",
                )?;
                step(
                    (api.process_uri)(tx, uri.as_ptr(), method.as_ptr(), version.as_ptr()),
                    "uri",
                )?;
                for (name, value) in req.headers {
                    step(
                        (api.add_n_request_header)(
                            tx,
                            name.as_ptr(),
                            name.len(),
                            value.as_ptr(),
                            value.len(),
                        ),
                        "header",
                    )?;
                }
                step((api.process_request_headers)(tx), "request headers")?;
                if !req.body.is_empty() {
                    step(
                        (api.append_request_body)(tx, req.body.as_ptr(), req.body.len()),
                        "body",
                    )?;
                }
                step((api.process_request_body)(tx), "request body")
            })();
            (api.transaction_cleanup)(tx);
            steps?;
        }
        Ok(lines.iter().filter_map(|l| RuleMatch::parse(l)).collect())
    }
}

/// libmodsecurity 3.0.9 has no `IncludeOptional` (Debian's loader uses it for the operator's
/// exclusion files): an `Include` when the file exists, else nothing.
pub(super) fn without_include_optional(loader: &str) -> String {
    let mut out = String::new();
    for line in loader.lines() {
        match line.trim().strip_prefix("IncludeOptional ") {
            Some(p) if Path::new(p.trim()).is_file() => out += &format!("Include {}\n", p.trim()),
            Some(_) => {}
            None => out += &format!("{line}\n"),
        }
    }
    out
}

fn step(rc: i32, what: &'static str) -> Result<(), EngineError> {
    // The C API answers 1 for success and 0 for failure.
    if rc == 0 {
        Err(EngineError::Step(what))
    } else {
        Ok(())
    }
}

/// `<request id>.pl<N>`; the rule in templates/waf/modsecurity.conf reads the suffix.
fn transaction_id(request_id: &str, paranoia: u8) -> CString {
    let id: String = request_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    let id = if id.is_empty() { "-".into() } else { id };
    CString::new(format!("{id}.pl{}", paranoia.clamp(1, 4))).expect("no NUL")
}

/// libmodsecurity's log callback: one line per matched rule, into the transaction's Vec.
unsafe extern "C" fn collect_log(data: *mut c_void, msg: *const c_void) {
    if data.is_null() || msg.is_null() {
        return;
    }
    // SAFETY: `data` is the `Vec<String>` evaluate() passed for this transaction, used by this
    // thread only; `msg` is a NUL-terminated string (TextLogProperty).
    let (lines, text) = unsafe {
        (
            &mut *data.cast::<Vec<String>>(),
            CStr::from_ptr(msg.cast()).to_string_lossy().into_owned(),
        )
    };
    lines.push(text);
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: both were created in from_rules and no transaction outlives `evaluate`.
        unsafe {
            (self.api.rules_cleanup)(self.rules);
            (self.api.cleanup)(self.msc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::waf::DEBIAN_CRS;

    fn crs() -> Engine {
        Engine::load(Path::new(DEBIAN_CRS)).unwrap_or_else(|e| {
            panic!(
                "{e} (scripts/ensure-test-tools.sh installs libmodsecurity3 and modsecurity-crs)"
            )
        })
    }

    fn get<'a>(uri: &'a str, headers: &'a [(Vec<u8>, Vec<u8>)]) -> Request<'a> {
        Request {
            id: "0f0e-test",
            client_ip: "127.0.0.1",
            client_port: 5000,
            method: "GET",
            uri,
            version: "1.1",
            headers,
            body: b"",
        }
    }

    fn headers(ua: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        [("Host", "a.test"), ("User-Agent", ua), ("Accept", "*/*")]
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn ids(m: &[RuleMatch]) -> Vec<u32> {
        m.iter().map(|m| m.id).collect()
    }

    #[test]
    fn the_crs_finds_sqli_and_scores_as_the_crs_does() {
        let engine = crs();
        assert!(
            engine.version().starts_with("ModSecurity v3"),
            "{}",
            engine.version()
        );
        let h = headers("curl/8");
        let m = engine
            .evaluate(&get("/?id=1%27%20OR%20%271%27%3D%271", &h), 1)
            .unwrap();
        assert!(ids(&m).contains(&942100), "{m:?}");
        // Our score equals the CRS's own total (its 949110 line) when nothing is excluded.
        let ours: u32 = m.iter().map(RuleMatch::anomaly_points).sum();
        let total = m
            .iter()
            .find(|m| m.id == 949110)
            .expect("949110")
            .message
            .clone();
        assert!(
            total.contains(&format!("Total Score: {ours})")),
            "{total} vs {ours}"
        );
        assert!(engine
            .evaluate(&get("/index.html?page=2", &h), 1)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_paranoia_level_is_per_request() {
        let engine = crs();
        let h = headers("curl/8");
        let req = get("/?q=hello(world)%3B%20select", &h);
        let pl1 = ids(&engine.evaluate(&req, 1).unwrap());
        let pl4 = ids(&engine.evaluate(&req, 4).unwrap());
        assert!(
            !pl1.contains(&920273) && pl4.contains(&920273),
            "{pl1:?} {pl4:?}"
        );
        // And back: one engine, the level of each transaction only.
        assert_eq!(ids(&engine.evaluate(&req, 1).unwrap()), pl1);
    }

    #[test]
    fn bad_rules_and_a_missing_crs_are_refused_by_name() {
        let e = Engine::from_rules("SecRule ARGS \"@rx x\" \"id:1,phase:1,nonsense\"")
            .err()
            .unwrap();
        assert!(
            matches!(e, EngineError::Rules(ref m) if !m.is_empty()),
            "{e}"
        );
        let e = Engine::load(Path::new("/nonexistent/crs.load"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent/crs.load"), "{e}");
    }

    #[test]
    fn include_optional_becomes_include_only_for_files_that_exist() {
        let text = format!("Include /a\nIncludeOptional {DEBIAN_CRS}\nIncludeOptional /nope\n");
        assert_eq!(
            without_include_optional(&text),
            format!("Include /a\nInclude {DEBIAN_CRS}\n")
        );
    }
}
