//! The application routes. See the crate README for the contract.
//!
//! | route                                   | answer                                   |
//! |-----------------------------------------|------------------------------------------|
//! | `GET <ready-path>` (default `/ready`)   | 503 `not ready\n`, then 200 `ready\n`    |
//! | `GET /version`                          | 200, body exactly `V`                    |
//! | `GET /`                                 | 200, body `V\n`                          |
//! | `GET /stream?lines=N&interval_ms=M`     | 200 chunked, one chunk `V i/N\n` a line  |
//! | other path                              | 404                                      |
//! | known path, method not GET/HEAD         | 405 with `allow: GET, HEAD`              |
//!
//! `HEAD` is answered like `GET` without the body (and, for `/stream`,
//! immediately, without waiting for the lines).

use std::io::Write;
use std::time::{Duration, Instant};

use crate::http::{self, BodyLen, Framing, Request};

/// Default and maximum number of lines of `/stream`.
pub const DEFAULT_LINES: u64 = 10;
pub const MAX_LINES: u64 = 100_000;
/// Default and maximum pause between two lines of `/stream`.
pub const DEFAULT_INTERVAL_MS: u64 = 200;
pub const MAX_INTERVAL_MS: u64 = 60_000;

/// Paths that `--ready-path` may not shadow.
pub const BUILTIN_PATHS: [&str; 3] = ["/", "/version", "/stream"];

/// Shared, read-only application state.
pub struct App {
    pub version: String,
    pub ready_path: String,
    /// The instant from which `ready_path` answers 200.
    pub ready_at: Instant,
}

/// How a response went, for the request log.
pub struct Outcome {
    pub status: u16,
    pub note: String,
    /// False when the response could not be written entirely: the
    /// connection must then be closed.
    pub completed: bool,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct StreamParams {
    pub lines: u64,
    pub interval_ms: u64,
}

fn parse_bounded(name: &str, value: &str, max: u64) -> Result<u64, String> {
    let err = || format!("{name} must be an integer between 0 and {max}, got {value:?}");
    if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    match value.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(err()),
    }
}

/// Parses the query of `/stream`. Unknown parameters are ignored; a known
/// one given twice, or with a value that is not a plain decimal integer in
/// range, is an error (no percent-decoding is done).
pub fn parse_stream_query(query: &str) -> Result<StreamParams, String> {
    let mut lines = None;
    let mut interval_ms = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (slot, max) = match key {
            "lines" => (&mut lines, MAX_LINES),
            "interval_ms" => (&mut interval_ms, MAX_INTERVAL_MS),
            _ => continue,
        };
        if slot.is_some() {
            return Err(format!("{key} given more than once"));
        }
        *slot = Some(parse_bounded(key, value, max)?);
    }
    Ok(StreamParams {
        lines: lines.unwrap_or(DEFAULT_LINES),
        interval_ms: interval_ms.unwrap_or(DEFAULT_INTERVAL_MS),
    })
}

/// Line `i` (1-based) of a stream of `n` lines.
pub fn stream_line(version: &str, i: u64, n: u64) -> String {
    format!("{version} {i}/{n}\n")
}

fn decimal_len(mut n: u64) -> u64 {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// Total body length of a stream of `n` lines, announced as
/// `content-length` to HTTP/1.0 clients, which cannot take chunked encoding.
pub fn stream_body_len(version: &str, n: u64) -> u64 {
    // Each line is "V i/n\n": len(V) + 1 + len(i) + 1 + len(n) + 1.
    let fixed = version.len() as u64 + 3 + decimal_len(n);
    let mut digits = 0;
    let mut lo = 1;
    while lo <= n {
        let hi = (lo * 10 - 1).min(n);
        digits += (hi - lo + 1) * decimal_len(lo);
        lo *= 10;
    }
    n * fixed + digits
}

fn fixed(
    w: &mut impl Write,
    f: &Framing,
    status: u16,
    extra: &[(&str, &str)],
    body: &[u8],
) -> Outcome {
    let result = http::write_fixed(w, f, status, extra, body);
    Outcome {
        status,
        note: match &result {
            Ok(()) => String::new(),
            Err(e) => format!("write failed: {e}"),
        },
        completed: result.is_ok(),
    }
}

/// Answers one request on `w`.
pub fn respond<W: Write>(app: &App, req: &Request, f: &Framing, w: &mut W) -> Outcome {
    let path = req.path();
    let known = path == app.ready_path || BUILTIN_PATHS.contains(&path);
    if !known {
        return fixed(w, f, 404, &[], b"not found\n");
    }
    if req.method != "GET" && req.method != "HEAD" {
        return fixed(
            w,
            f,
            405,
            &[("allow", "GET, HEAD")],
            b"method not allowed\n",
        );
    }
    let v = app.version.as_str();
    if path == app.ready_path {
        return if Instant::now() >= app.ready_at {
            fixed(w, f, 200, &[], b"ready\n")
        } else {
            fixed(w, f, 503, &[], b"not ready\n")
        };
    }
    match path {
        "/version" => fixed(w, f, 200, &[], v.as_bytes()),
        "/" => fixed(w, f, 200, &[], format!("{v}\n").as_bytes()),
        _ => match parse_stream_query(req.query()) {
            Ok(params) => stream(w, f, v, params),
            Err(msg) => fixed(w, f, 400, &[], format!("{msg}\n").as_bytes()),
        },
    }
}

fn stream<W: Write>(w: &mut W, f: &Framing, v: &str, p: StreamParams) -> Outcome {
    let n = p.lines;
    let chunked = !f.http10;
    let len = if chunked {
        BodyLen::Chunked
    } else {
        BodyLen::Known(stream_body_len(v, n))
    };
    let mut sent = 0;
    let result = (|| {
        http::write_head(
            w,
            f,
            200,
            "text/plain",
            &[("cache-control", "no-store")],
            len,
        )?;
        if f.head_only {
            return Ok(());
        }
        for i in 1..=n {
            if i > 1 {
                std::thread::sleep(Duration::from_millis(p.interval_ms));
            }
            let line = stream_line(v, i, n);
            if chunked {
                http::write_chunk(w, line.as_bytes())?;
            } else {
                w.write_all(line.as_bytes())?;
                w.flush()?;
            }
            sent = i;
        }
        if chunked {
            http::write_last_chunk(w)?;
        }
        Ok::<(), std::io::Error>(())
    })();
    let note = match &result {
        Ok(()) if f.head_only => String::new(),
        Ok(()) => format!("{n} lines"),
        Err(e) => format!("aborted after {sent}/{n} lines: {e}"),
    };
    Outcome {
        status: 200,
        note,
        completed: result.is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::read_request;

    #[test]
    fn stream_query_defaults_and_values() {
        let d = StreamParams {
            lines: DEFAULT_LINES,
            interval_ms: DEFAULT_INTERVAL_MS,
        };
        assert_eq!(parse_stream_query(""), Ok(d));
        assert_eq!(parse_stream_query("&&other=x&flag"), Ok(d));
        assert_eq!(
            parse_stream_query("lines=5&interval_ms=20"),
            Ok(StreamParams {
                lines: 5,
                interval_ms: 20
            })
        );
        assert_eq!(
            parse_stream_query("interval_ms=0&lines=100000"),
            Ok(StreamParams {
                lines: 100_000,
                interval_ms: 0
            })
        );
        assert_eq!(
            parse_stream_query("interval_ms=60000").unwrap().interval_ms,
            60_000
        );
        assert_eq!(parse_stream_query("lines=007").unwrap().lines, 7);
    }

    #[test]
    fn stream_query_rejects_bad_values() {
        for q in [
            "lines=",
            "lines",
            "lines=abc",
            "lines=-1",
            "lines=+1",
            "lines=1.5",
            "lines=100001",
            "lines=99999999999999999999",
            "interval_ms=60001",
            "interval_ms=%31",
            "lines=1&lines=2",
        ] {
            assert!(parse_stream_query(q).is_err(), "{q}");
        }
    }

    #[test]
    fn stream_body_len_matches_lines() {
        for v in ["1.4.2", "a"] {
            for n in [0, 1, 9, 10, 11, 99, 100, 101, 1234] {
                let actual: usize = (1..=n).map(|i| stream_line(v, i, n).len()).sum();
                assert_eq!(stream_body_len(v, n), actual as u64, "{v} {n}");
            }
        }
        assert_eq!(stream_line("1.5.0", 3, 5), "1.5.0 3/5\n");
    }

    fn run(app: &App, raw: &str) -> (Outcome, String) {
        let req = read_request(&mut raw.as_bytes()).unwrap().unwrap();
        let f = Framing {
            x_version: &app.version,
            keep_alive: req.keep_alive,
            head_only: req.method == "HEAD",
            http10: req.version == http::Version::Http10,
        };
        let mut out = Vec::new();
        let o = respond(app, &req, &f, &mut out);
        (o, String::from_utf8(out).unwrap())
    }

    fn app(ready_in: Duration) -> App {
        App {
            version: "1.5.0".into(),
            ready_path: "/pret".into(),
            ready_at: Instant::now() + ready_in,
        }
    }

    #[test]
    fn routes_answer() {
        let a = app(Duration::ZERO);
        let (o, out) = run(&a, "GET /version HTTP/1.1\r\n\r\n");
        assert_eq!(o.status, 200);
        assert!(out.ends_with("content-length: 5\r\n\r\n1.5.0"), "{out}");
        let (_, out) = run(&a, "GET /?x=1 HTTP/1.1\r\n\r\n");
        assert!(out.ends_with("\r\n\r\n1.5.0\n"), "{out}");
        assert_eq!(run(&a, "GET /pret HTTP/1.1\r\n\r\n").0.status, 200);
        assert_eq!(run(&a, "GET /ready HTTP/1.1\r\n\r\n").0.status, 404);
        assert_eq!(
            run(&a, "GET /stream?lines=x HTTP/1.1\r\n\r\n").0.status,
            400
        );
        let (o, out) = run(&a, "DELETE /version HTTP/1.1\r\n\r\n");
        assert_eq!(o.status, 405);
        assert!(out.contains("allow: GET, HEAD\r\n"));
        assert_eq!(run(&a, "DELETE /nope HTTP/1.1\r\n\r\n").0.status, 404);
        let (o, out) = run(&a, "HEAD /version HTTP/1.1\r\n\r\n");
        assert_eq!(o.status, 200);
        assert!(out.ends_with("content-length: 5\r\n\r\n"), "{out}");

        let late = app(Duration::from_secs(3600));
        let (o, out) = run(&late, "GET /pret HTTP/1.1\r\n\r\n");
        assert_eq!(o.status, 503);
        assert!(out.ends_with("\r\n\r\nnot ready\n"));
    }

    #[test]
    fn stream_framing() {
        let a = app(Duration::ZERO);
        let (o, out) = run(&a, "GET /stream?lines=2&interval_ms=0 HTTP/1.1\r\n\r\n");
        assert_eq!(o.status, 200);
        assert!(o.completed);
        assert!(out.contains("transfer-encoding: chunked\r\n"));
        assert!(
            out.ends_with("\r\n\r\na\r\n1.5.0 1/2\n\r\na\r\n1.5.0 2/2\n\r\n0\r\n\r\n"),
            "{out}"
        );

        let (_, out) = run(&a, "GET /stream?lines=2&interval_ms=0 HTTP/1.0\r\n\r\n");
        assert!(!out.contains("transfer-encoding"));
        assert!(out.ends_with("content-length: 20\r\nconnection: close\r\ncache-control: no-store\r\n\r\n1.5.0 1/2\n1.5.0 2/2\n"), "{out}");

        let (_, out) = run(
            &a,
            "HEAD /stream?lines=2&interval_ms=60000 HTTP/1.1\r\n\r\n",
        );
        assert!(
            out.ends_with("transfer-encoding: chunked\r\ncache-control: no-store\r\n\r\n"),
            "{out}"
        );
    }
}
