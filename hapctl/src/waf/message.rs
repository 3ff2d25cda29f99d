//! The SPOE message HAProxy sends for each request (`spoe-message hapctl-waf` in
//! templates/waf/spoe.conf.j2), parsed into what the engine needs.

use spop::frame::Message;
use spop::TypedData;

use crate::model::{Invalid, WafPolicy};

use super::engine::Request;

/// The message's name in the SPOE configuration.
pub const MESSAGE: &str = "hapctl-waf";

/// One request to inspect, owned (it moves to a blocking thread).
#[derive(Debug, Clone)]
pub struct Inspect {
    pub policy: WafPolicy,
    pub id: String,
    pub client_ip: String,
    pub client_port: u16,
    pub method: String,
    pub path: String,
    pub query: String,
    pub version: String,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
    /// Fewer body bytes arrived than the policy inspects (the advertised length, the domain's
    /// limit and `[waf] body_max`, the least of them): HAProxy cut the body, its last argument,
    /// to fit the one SPOP frame beside large headers, or the client was slower than
    /// `wait-for-body`. The agent does not pass such a request as clean (docs/waf.md).
    pub body_cut: bool,
}

impl Inspect {
    /// `body_max`: the body bytes HAProxy is configured to send (`[waf] body_max`).
    pub fn from_message(m: &Message, body_max: u32) -> Result<Inspect, Invalid> {
        let policy = WafPolicy::from_map_value(&text(m, "policy"))?;
        let mut body = match m.get("body") {
            Some(TypedData::Binary(b)) => b.clone(),
            Some(TypedData::String(s)) => s.clone().into_bytes(),
            _ => Vec::new(),
        };
        // Unknown (absent, or negative: no length advertised) is no claim of a cut.
        let advertised = int(m, "body_size").and_then(|n| u64::try_from(n).ok());
        let wanted = advertised
            .unwrap_or(0)
            .min(u64::from(policy.body_limit.min(body_max)));
        let body_cut = (body.len() as u64) < wanted;
        body.truncate(policy.body_limit as usize);
        let headers = match m.get("headers") {
            Some(TypedData::Binary(b)) => parse_headers(b)
                .ok_or_else(|| Invalid::new("headers", "", "not HAProxy's req.hdrs_bin format"))?,
            _ => Vec::new(),
        };
        let client_port = int(m, "port")
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(0);
        Ok(Inspect {
            policy,
            id: text(m, "id"),
            client_ip: text(m, "ip"),
            client_port,
            method: text(m, "method"),
            path: text(m, "path"),
            query: text(m, "query"),
            version: text(m, "version"),
            headers,
            body,
            body_cut,
        })
    }

    /// `/path?query` as the client sent it.
    pub fn uri(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }

    /// The engine's view; `uri` is [`Inspect::uri`] (kept by the caller).
    pub fn request<'a>(&'a self, uri: &'a str) -> Request<'a> {
        Request {
            id: &self.id,
            client_ip: &self.client_ip,
            client_port: self.client_port,
            method: &self.method,
            uri,
            version: &self.version,
            headers: &self.headers,
            body: &self.body,
        }
    }
}

/// A string or address argument as text; absent or NULL (a fetch that found nothing) is "".
fn text(m: &Message, name: &str) -> String {
    match m.get(name) {
        Some(TypedData::String(s)) => s.clone(),
        Some(TypedData::Binary(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(TypedData::IPv4(a)) => a.to_string(),
        Some(TypedData::IPv6(a)) => a
            .to_ipv4_mapped()
            .map_or_else(|| a.to_string(), |v4| v4.to_string()),
        _ => String::new(),
    }
}

/// An integer argument, whichever width HAProxy encoded it in.
fn int(m: &Message, name: &str) -> Option<i64> {
    match m.get(name)? {
        TypedData::Int32(n) => Some(i64::from(*n)),
        TypedData::UInt32(n) => Some(i64::from(*n)),
        TypedData::Int64(n) => Some(*n),
        TypedData::UInt64(n) => i64::try_from(*n).ok(),
        _ => None,
    }
}

/// `req.hdrs_bin`: (varint length, name, varint length, value)… ended by two empty strings.
pub fn parse_headers(mut input: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    loop {
        let name = take(&mut input)?;
        let value = take(&mut input)?;
        if name.is_empty() && value.is_empty() {
            return Some(out);
        }
        out.push((name.to_vec(), value.to_vec()));
    }
}

fn take<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (rest, len) = spop::decode_varint(input).ok()?;
    let len = usize::try_from(len).ok()?;
    if rest.len() < len {
        return None;
    }
    let (s, rest) = rest.split_at(len);
    *input = rest;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_headers_parse_and_truncated_ones_are_refused() {
        let mut b = Vec::new();
        for s in ["host", "a.test", "user-agent", "x"] {
            spop::encode_varint_into(s.len() as u64, &mut b);
            b.extend_from_slice(s.as_bytes());
        }
        b.extend_from_slice(&[0, 0]);
        let h = parse_headers(&b).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[1], (b"user-agent".to_vec(), b"x".to_vec()));
        assert_eq!(parse_headers(&b[..b.len() - 3]), None);
    }
}
