//! Dashboard sessions: the API token is exchanged once for a random session id kept in an
//! HttpOnly cookie, so the token never lives in the page. Sessions are in the daemon's memory
//! only (a restart signs everyone out) and expire after an idle time and a maximum age.
//!
//! A session authorises `/v1` requests like the bearer token does, but every request that may
//! change something must also carry the session's CSRF token in [`CSRF_HEADER`]: a custom header
//! no cross-site form can send (and a cross-site `fetch` with it needs a CORS preflight this
//! daemon never grants), on top of `SameSite=Strict`. A request whose `Origin` is not its own
//! `Host` is refused too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, Method};

use crate::access::random_hex;
use crate::model::Scopes;

/// Compares in time independent of where the strings differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The session cookie's name.
pub const COOKIE: &str = "hapctl_session";
/// The header carrying the session's CSRF token on every non-GET request.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A session unused this long is gone.
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session older than this is gone, used or not (also the cookie's `Max-Age`).
pub const MAX_AGE: Duration = Duration::from_secs(12 * 60 * 60);
/// Sessions kept at most; signing in past it forgets the least recently used one.
const MAX_SESSIONS: usize = 256;

struct Session {
    csrf: String,
    created: Instant,
    seen: Instant,
    user: SessionUser,
}

/// Who signed in: the name and scopes of the token given, which the session acts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUser {
    pub token: String,
    pub scopes: Scopes,
    /// The first characters of the session id: which session, in the audit trail.
    pub tag: String,
}

impl Session {
    fn alive(&self, now: Instant) -> bool {
        now.duration_since(self.seen) < IDLE && now.duration_since(self.created) < MAX_AGE
    }
}

/// The sessions of one daemon.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

/// What a request's cookie and headers amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionVerdict {
    /// No session cookie, or one that names no live session.
    NoSession,
    /// A live session, and a safe method or the right CSRF token.
    Allowed(SessionUser),
    /// A live session, but a change without the right CSRF token or from another origin.
    Forbidden(&'static str),
}

impl Sessions {
    /// A new session acting with the token `token` and its scopes: `(id, csrf)`, both 256
    /// random bits in hex.
    pub fn create(
        &self,
        now: Instant,
        token: String,
        scopes: Scopes,
    ) -> std::io::Result<(String, String)> {
        let (id, csrf) = (random_hex()?, random_hex()?);
        let mut map = self.lock();
        map.retain(|_, s| s.alive(now));
        if map.len() >= MAX_SESSIONS {
            let oldest = map
                .iter()
                .min_by_key(|(_, s)| s.seen)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        let session = Session {
            csrf: csrf.clone(),
            created: now,
            seen: now,
            user: SessionUser {
                token,
                scopes,
                tag: id[..8].to_string(),
            },
        };
        map.insert(id.clone(), session);
        Ok((id, csrf))
    }

    /// The CSRF token and user of the live session `id`, which counts as used now.
    pub fn csrf(&self, id: &str, now: Instant) -> Option<(String, SessionUser)> {
        let mut map = self.lock();
        match map.get_mut(id) {
            Some(s) if s.alive(now) => {
                s.seen = now;
                Some((s.csrf.clone(), s.user.clone()))
            }
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Judges a request by its session cookie, CSRF header and origin.
    pub fn authorize(&self, method: &Method, headers: &HeaderMap, now: Instant) -> SessionVerdict {
        let Some((csrf, user)) = cookie(headers).and_then(|id| self.csrf(id, now)) else {
            return SessionVerdict::NoSession;
        };
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return SessionVerdict::Allowed(user);
        }
        if !same_origin(headers) {
            return SessionVerdict::Forbidden("a change from another origin");
        }
        match headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()) {
            Some(given) if constant_time_eq(given.as_bytes(), csrf.as_bytes()) => {
                SessionVerdict::Allowed(user)
            }
            Some(_) => SessionVerdict::Forbidden("wrong X-CSRF-Token"),
            None => SessionVerdict::Forbidden("a change needs the session's X-CSRF-Token header"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The session id of the request's `Cookie` header.
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .filter(|id| !id.is_empty())
}

/// An `Origin` header, when there is one, must name the host the request was sent to.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin.split_once("://").map(|(_, h)| h);
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// Whether the browser reached the daemon over HTTPS (through the edge, which sets
/// `X-Forwarded-Proto`); then the cookie is `Secure`.
pub fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value that starts a session.
pub fn set_cookie(id: &str, secure: bool) -> String {
    cookie_line(id, MAX_AGE.as_secs(), secure)
}

/// The `Set-Cookie` value that ends it in the browser.
pub fn clear_cookie(secure: bool) -> String {
    cookie_line("", 0, secure)
}

fn cookie_line(value: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
    use axum::http::HeaderValue;

    /// The user of the session `id` made by `create(_, "default", admin)`.
    fn user(id: &str) -> SessionUser {
        SessionUser {
            token: "default".into(),
            scopes: Scopes::admin(),
            tag: id[..8].to_string(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn ids_and_csrf_tokens_are_random_and_distinct() {
        let s = Sessions::default();
        let now = Instant::now();
        let (a, ca) = s.create(now, "default".into(), Scopes::admin()).unwrap();
        let (b, cb) = s.create(now, "default".into(), Scopes::admin()).unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        let all = [&a, &ca, &b, &cb];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }

    #[test]
    fn reads_are_allowed_with_the_cookie_changes_need_the_csrf_header() {
        let s = Sessions::default();
        let now = Instant::now();
        let (id, csrf) = s.create(now, "default".into(), Scopes::admin()).unwrap();
        let c = format!("other=1; {COOKIE}={id}");
        let get = headers(&[("cookie", &c)]);
        assert_eq!(
            s.authorize(&Method::GET, &get, now),
            SessionVerdict::Allowed(user(&id))
        );
        assert!(matches!(
            s.authorize(&Method::POST, &get, now),
            SessionVerdict::Forbidden(_)
        ));
        let wrong = headers(&[("cookie", &c), (CSRF_HEADER, &csrf[1..])]);
        assert!(matches!(
            s.authorize(&Method::DELETE, &wrong, now),
            SessionVerdict::Forbidden(_)
        ));
        let right = headers(&[("cookie", &c), (CSRF_HEADER, &csrf)]);
        assert_eq!(
            s.authorize(&Method::PUT, &right, now),
            SessionVerdict::Allowed(user(&id))
        );
        // The CSRF token alone is nothing.
        let no_cookie = headers(&[(CSRF_HEADER, &csrf)]);
        assert_eq!(
            s.authorize(&Method::PUT, &no_cookie, now),
            SessionVerdict::NoSession
        );
        let bad_cookie = headers(&[("cookie", &format!("{COOKIE}={csrf}"))]);
        assert_eq!(
            s.authorize(&Method::GET, &bad_cookie, now),
            SessionVerdict::NoSession
        );
    }

    #[test]
    fn a_change_from_another_origin_is_refused_even_with_the_token() {
        let s = Sessions::default();
        let now = Instant::now();
        let (id, csrf) = s.create(now, "default".into(), Scopes::admin()).unwrap();
        let c = format!("{COOKIE}={id}");
        let base = [("cookie", c.as_str()), (CSRF_HEADER, csrf.as_str())];
        let from = |origin: &str| {
            let mut h = headers(&base);
            h.insert("host", HeaderValue::from_static("127.0.0.1:9000"));
            h.insert("origin", HeaderValue::from_str(origin).unwrap());
            s.authorize(&Method::POST, &h, now)
        };
        assert_eq!(
            from("http://127.0.0.1:9000"),
            SessionVerdict::Allowed(user(&id))
        );
        assert!(matches!(
            from("http://evil.example"),
            SessionVerdict::Forbidden(_)
        ));
        assert!(matches!(from("null"), SessionVerdict::Forbidden(_)));
    }

    #[test]
    fn sessions_expire_when_idle_and_when_old_and_on_removal() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (id, _) = s.create(t0, "default".into(), Scopes::admin()).unwrap();
        assert!(s.csrf(&id, t0 + IDLE - Duration::from_secs(1)).is_some());
        // Used just now, so it lives another idle period...
        assert!(s.csrf(&id, t0 + IDLE + Duration::from_secs(30)).is_some());
        // ...but not past its maximum age, however busy.
        let mut t = t0;
        while t + IDLE / 2 < t0 + MAX_AGE {
            t += IDLE / 2;
            assert!(s.csrf(&id, t).is_some());
        }
        assert!(s.csrf(&id, t0 + MAX_AGE).is_none());
        assert!(s.csrf(&id, t0).is_none(), "an expired session is forgotten");

        let (idle, _) = s.create(t0, "default".into(), Scopes::admin()).unwrap();
        assert!(s.csrf(&idle, t0 + IDLE).is_none());
        let (gone, _) = s.create(t0, "default".into(), Scopes::admin()).unwrap();
        s.remove(&gone);
        assert!(s.csrf(&gone, t0).is_none());
    }

    #[test]
    fn the_number_of_sessions_is_bounded() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (first, _) = s.create(t0, "default".into(), Scopes::admin()).unwrap();
        for i in 1..=MAX_SESSIONS as u64 {
            s.create(
                t0 + Duration::from_millis(i),
                "default".into(),
                Scopes::admin(),
            )
            .unwrap();
        }
        assert_eq!(s.lock().len(), MAX_SESSIONS);
        assert!(s.csrf(&first, t0 + Duration::from_secs(1)).is_none());
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_https() {
        let line = set_cookie("abc", false);
        assert_eq!(
            line,
            "hapctl_session=abc; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict"
        );
        assert!(set_cookie("abc", true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
        assert!(over_https(&headers(&[("x-forwarded-proto", "https")])));
        assert!(!over_https(&headers(&[("x-forwarded-proto", "http")])));
        assert!(!over_https(&HeaderMap::new()));
    }
}
