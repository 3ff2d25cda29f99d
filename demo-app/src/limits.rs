//! The limits on a request head that the hand-written server this app once
//! had enforced and hyper does not (hyper allows a 64 KiB target and decodes
//! request bodies of any size): checked on every parsed head before routing.
//! A refused request gets its status and the reason, and the connection is
//! closed. Chunked request bodies are accepted (the old server refused them):
//! HAProxy forwards an HTTP/2 or HTTP/3 request whose end it has not seen with
//! its headers that way, an empty GET included.

use axum::http::header::{HeaderValue, CONNECTION};
use axum::http::{Request, StatusCode};
use axum::response::Response;
use hyper::body::Body;

use crate::app::text;

/// Longest accepted request line (`METHOD target HTTP/1.x`), terminator
/// excluded.
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
/// Longest accepted header line (`name: value`), terminator excluded.
pub const MAX_HEADER_LINE: usize = 8 * 1024;
/// Largest request body announced by `content-length` that is accepted (the
/// routes ignore it).
pub const MAX_BODY: u64 = 1024 * 1024;

/// Why a request is refused before routing.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: String,
}

impl Refusal {
    /// The answer: the reason as a `text/plain` body, and the connection
    /// closed after it (the request's body, if any, is not read).
    pub fn response(&self) -> Response {
        let mut res = text(self.status, format!("{}\n", self.why));
        res.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        res
    }
}

/// The first limit the request's head goes beyond, if any.
pub fn check<B: Body>(req: &Request<B>) -> Option<Refusal> {
    let refuse = |status, why: String| Some(Refusal { status, why });
    // "METHOD SP target SP HTTP/1.x"
    let request_line = req.method().as_str().len() + req.uri().to_string().len() + 10;
    if request_line > MAX_REQUEST_LINE {
        let why = format!("request line longer than {MAX_REQUEST_LINE} bytes");
        return refuse(StatusCode::URI_TOO_LONG, why);
    }
    let longest_header = req.headers().iter().map(|(name, value)| {
        // "name: value"
        name.as_str().len() + 2 + value.len()
    });
    if longest_header.max().unwrap_or(0) > MAX_HEADER_LINE {
        let why = format!("header line longer than {MAX_HEADER_LINE} bytes");
        return refuse(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, why);
    }
    if req.body().size_hint().lower() > MAX_BODY {
        let why = format!("request body larger than {MAX_BODY} bytes");
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, why);
    }
    None
}

#[cfg(test)]
mod tests {
    use axum::body::Body as AxumBody;

    use super::*;

    fn request(target: &str, headers: &[(&str, &str)], body: AxumBody) -> Request<AxumBody> {
        let mut req = Request::builder().method("GET").uri(target);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(body).unwrap()
    }

    fn status(req: &Request<AxumBody>) -> Option<StatusCode> {
        check(req).map(|r| r.status)
    }

    #[test]
    fn request_line_limit() {
        // "GET " + "/" + path + " HTTP/1.1" is exactly the limit.
        let at_limit = format!("/{}", "a".repeat(MAX_REQUEST_LINE - 14));
        assert_eq!(status(&request(&at_limit, &[], AxumBody::empty())), None);
        let over = format!("/{}", "a".repeat(MAX_REQUEST_LINE - 13));
        let refused = check(&request(&over, &[], AxumBody::empty())).unwrap();
        assert_eq!(refused.status, StatusCode::URI_TOO_LONG);
        let res = refused.response();
        assert_eq!(res.headers()[CONNECTION], "close");
    }

    #[test]
    fn header_line_limit() {
        // "x-a: " + value is exactly the limit.
        let at_limit = "v".repeat(MAX_HEADER_LINE - 5);
        let req = request("/", &[("x-a", &at_limit)], AxumBody::empty());
        assert_eq!(status(&req), None);
        let over = "v".repeat(MAX_HEADER_LINE - 4);
        let req = request("/", &[("x-a", &over)], AxumBody::empty());
        assert_eq!(
            status(&req),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
    }

    #[test]
    fn bodies() {
        let te = request("/", &[("transfer-encoding", "chunked")], AxumBody::empty());
        assert_eq!(status(&te), None);
        let at_limit = vec![0u8; MAX_BODY as usize];
        assert_eq!(status(&request("/", &[], at_limit.into())), None);
        let over = vec![0u8; MAX_BODY as usize + 1];
        assert_eq!(
            status(&request("/", &[], over.into())),
            Some(StatusCode::PAYLOAD_TOO_LARGE)
        );
    }
}
