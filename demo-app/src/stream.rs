//! `/stream?lines=N&interval_ms=M`: `N` lines `V i/N\n`, each sent as its
//! own chunk as soon as it is due, `M` ms apart. HTTP/1.0 clients, which
//! cannot take chunked encoding, get the same lines under a `content-length`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH};
use axum::http::{Method, StatusCode, Uri, Version};
use axum::response::Response;
use axum::Extension;
use futures_util::stream;

use crate::app::{text, App};
use crate::log::{LoggedByBody, RequestLog};

/// Default and maximum number of lines of `/stream`.
pub const DEFAULT_LINES: u64 = 10;
pub const MAX_LINES: u64 = 100_000;
/// Default and maximum pause between two lines of `/stream`.
pub const DEFAULT_INTERVAL_MS: u64 = 200;
pub const MAX_INTERVAL_MS: u64 = 60_000;

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

/// The `/stream` handler. The request's log line is written when the body
/// ends, with the number of lines sent.
pub async fn stream(
    State(app): State<Arc<App>>,
    method: Method,
    version: Version,
    uri: Uri,
    Extension(log): Extension<RequestLog>,
) -> Response {
    let params = match parse_stream_query(uri.query().unwrap_or("")) {
        Ok(p) => p,
        Err(msg) => return text(StatusCode::BAD_REQUEST, format!("{msg}\n")),
    };
    let body = if method == Method::HEAD {
        // Not sized: no `content-length: 0` is announced for it.
        Body::from_stream(stream::empty::<Result<String, Infallible>>())
    } else {
        lines(Lines {
            app: Arc::clone(&app),
            params,
            sent: 0,
            log,
        })
    };
    let mut res = text(StatusCode::OK, body);
    let headers = res.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if version == Version::HTTP_10 {
        headers.insert(
            CONTENT_LENGTH,
            stream_body_len(&app.version, params.lines).into(),
        );
    }
    if method != Method::HEAD {
        res.extensions_mut().insert(LoggedByBody);
    }
    res
}

/// The state of one stream; logs the request when dropped, that is when the
/// body ends or the connection is gone.
struct Lines {
    app: Arc<App>,
    params: StreamParams,
    sent: u64,
    log: RequestLog,
}

impl Drop for Lines {
    fn drop(&mut self) {
        let n = self.params.lines;
        let note = if self.sent == n {
            format!("{n} lines")
        } else {
            format!("aborted after {}/{n} lines", self.sent)
        };
        self.log.finish(200, &note);
    }
}

/// One chunk per line: hyper writes and flushes each frame as it comes.
fn lines(state: Lines) -> Body {
    Body::from_stream(stream::unfold(state, |mut s| async move {
        let n = s.params.lines;
        if s.sent == n {
            return None;
        }
        // Even a zero sleep would wait for the timer's next tick (1 ms).
        if s.sent > 0 && s.params.interval_ms > 0 {
            tokio::time::sleep(Duration::from_millis(s.params.interval_ms)).await;
        }
        s.sent += 1;
        let line = stream_line(&s.app.version, s.sent, n);
        Some((Ok::<_, Infallible>(line), s))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
