//! ETags on the dashboard's polling: a `GET /v1/...` answered 200 carries a weak ETag of its
//! body, and a request whose `If-None-Match` names it gets an empty 304. The browser's cache
//! turns the 304 back into the body, so a page polling every few seconds moves a few hundred
//! bytes while nothing changes. Requests with a bearer token (scripts, the CLI's peers) are left
//! exactly as they were.

use std::hash::{Hash, Hasher};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The largest body given an ETag (a list of 10,000 domains is a few MB).
const MAX_BODY: usize = 64 * 1024 * 1024;

pub async fn etag(req: Request, next: Next) -> Response {
    let polled = req.method() == Method::GET
        && req.uri().path().starts_with("/v1/")
        && !req.headers().contains_key(header::AUTHORIZATION);
    if !polled {
        return next.run(req).await;
    }
    let asked = req.headers().get(header::IF_NONE_MATCH).cloned();
    let response = next.run(req).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let tag = tag_of(&bytes);
    let Ok(value) = HeaderValue::from_str(&tag) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.insert(header::ETAG, value.clone());
    parts
        .headers
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if asked.is_some_and(|a| matches(&a, &tag)) {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn tag_of(bytes: &[u8]) -> String {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    format!("W/\"{:016x}-{}\"", h.finish(), bytes.len())
}

/// `If-None-Match: W/"a", W/"b"` or `*`.
fn matches(asked: &HeaderValue, tag: &str) -> bool {
    asked
        .to_str()
        .map(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_changes_with_the_body_and_matches_lists() {
        let a = tag_of(b"{\"x\":1}");
        assert_eq!(a, tag_of(b"{\"x\":1}"));
        assert_ne!(a, tag_of(b"{\"x\":2}"));
        assert!(a.starts_with("W/\""));
        let list = HeaderValue::from_str(&format!("W/\"0-0\", {a}")).unwrap();
        assert!(matches(&list, &a));
        assert!(matches(&HeaderValue::from_static("*"), &a));
        assert!(!matches(&HeaderValue::from_static("W/\"0-0\""), &a));
    }
}
