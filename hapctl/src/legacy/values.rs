//! The old database's cells as the importer meets them (SQLite affinity gives a column any
//! type), turned into model values or a reason. Pure.

use rusqlite::types::Value;

use crate::model::{Port, Profile, ServerOptions, TextContext};

/// How a cell looks in a reason: text quoted and bounded, other types named.
pub fn show(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => r.to_string(),
        Value::Text(s) => format!("{:?}", crate::model::bounded(s)),
        Value::Blob(b) => format!("a {}-byte blob", b.len()),
    }
}

/// A text cell (`None` for NULL); numbers are read as their digits, blobs refused.
pub fn text(field: &str, v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Text(s) => Ok(Some(s.clone())),
        Value::Integer(i) => Ok(Some(i.to_string())),
        Value::Real(_) | Value::Blob(_) => Err(format!("{field} {} is not text", show(v))),
    }
}

/// A BOOLEAN column: SQLite stores what was given (1, 0, '1', 'true', NULL…).
pub fn truthy(field: &str, v: &Value) -> Result<bool, String> {
    let refuse = || format!("{field} {} is neither true nor false", show(v));
    match v {
        Value::Null => Ok(false),
        Value::Integer(i) => Ok(*i != 0),
        Value::Real(r) => Ok(*r != 0.0),
        Value::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "" | "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(refuse()),
        },
        Value::Blob(_) => Err(refuse()),
    }
}

/// `server_port`: an integer, or the digits a string kept when affinity did not convert it.
pub fn port(v: &Value) -> Result<Port, String> {
    let digits = match v {
        Value::Integer(i) => i.to_string(),
        Value::Text(s) => s.clone(),
        other => return Err(format!("server port {} is not a port number", show(other))),
    };
    digits.parse::<Port>().map_err(|e| e.to_string())
}

/// The free text the old manager pasted into the server line, typed by the model's parser
/// (the same as the compat API's): a word it does not know refuses the whole text, so nothing
/// is silently dropped. No text means no option (the old default had no health check).
pub fn server_options(v: &Value, context: TextContext) -> Result<ServerOptions, String> {
    let text = text("server options", v)?.unwrap_or_default();
    ServerOptions::parse_text(&text, context).map_err(|e| {
        format!(
            "server options {:?} cannot be typed: {e}",
            crate::model::bounded(&text)
        )
    })
}

/// `template_override` (a template file name without `.tpl`) → a profile. `basic` only left
/// out header rewrites: hapctl's default is its nearest form.
pub fn profile(v: &Value) -> Result<Profile, String> {
    let name = text("template_override", v)?.unwrap_or_default();
    Profile::from_template(&name).ok_or_else(|| {
        format!(
            "template_override {:?} has no hapctl profile (known: hap_backend_basic, hap_backend_http_check, hap_backend_longlived, hap_backend_websocket)",
            crate::model::bounded(&name)
        )
    })
}

/// A naive date and time: `YYYY-MM-DD[T ]HH:MM:SS[.ffffff]` (Python's `isoformat()` leaves
/// the fraction out when it is zero; SQLite's `CURRENT_TIMESTAMP` has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Naive {
    pub year: i32,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
}

impl Naive {
    pub fn parse(s: &str) -> Option<Naive> {
        let b = s.as_bytes();
        let digits = |r: std::ops::Range<usize>| -> Option<u32> {
            let part = s.get(r)?;
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b' ') {
            return None;
        }
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        match &s[19..] {
            "" => {}
            frac if frac.len() > 1
                && frac.len() <= 10
                && frac.starts_with('.')
                && frac[1..].bytes().all(|c| c.is_ascii_digit()) => {}
            _ => return None,
        }
        let n = Naive {
            year: digits(0..4)? as i32,
            month: digits(5..7)? as u8,
            day: digits(8..10)? as u8,
            hour: digits(11..13)? as u8,
            minute: digits(14..16)? as u8,
            second: digits(17..19)? as u8,
        };
        n.date().ok().and(n.time().ok()).map(|_| n)
    }

    fn date(self) -> Result<time::Date, time::error::ComponentRange> {
        let month = time::Month::try_from(self.month)?;
        time::Date::from_calendar_date(self.year, month, self.day)
    }

    fn time(self) -> Result<time::Time, time::error::ComponentRange> {
        time::Time::from_hms(self.hour, self.minute, self.second)
    }

    /// Unix seconds, reading the time as UTC.
    pub fn as_utc(self) -> i64 {
        let date = self.date().expect("checked by parse");
        let time = self.time().expect("checked by parse");
        time::PrimitiveDateTime::new(date, time)
            .assume_utc()
            .unix_timestamp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_of_every_type() {
        assert!(truthy("f", &Value::Text("TRUE".into())).unwrap());
        assert!(!truthy("f", &Value::Null).unwrap());
        assert!(truthy("f", &Value::Text("maybe".into())).is_err());
        assert_eq!(port(&Value::Text("8080".into())).unwrap().get(), 8080);
        assert!(port(&Value::Text("".into())).is_err());
        assert!(port(&Value::Integer(70000)).is_err());
        assert!(port(&Value::Null).is_err());
    }

    #[test]
    fn options_are_typed_or_refused_whole() {
        let ctx = TextContext { resolvers: false };
        let o = server_options(&Value::Text("check weight 5 maxconn 100".into()), ctx).unwrap();
        assert_eq!((o.check, o.weight, o.maxconn), (true, Some(5), Some(100)));
        let none = server_options(&Value::Null, ctx).unwrap();
        assert!(!none.check);
        assert_eq!(
            server_options(&Value::Text("  ".into()), ctx).unwrap(),
            none
        );
        for bad in ["check cookie s1", "weight", "weight 300", "check; x"] {
            let e = server_options(&Value::Text(bad.into()), ctx).unwrap_err();
            assert!(e.contains("cannot be typed"), "{bad}: {e}");
        }
        assert!(server_options(&Value::Blob(vec![1]), ctx).is_err());
    }

    #[test]
    fn templates_map_to_profiles() {
        assert_eq!(profile(&Value::Null).unwrap(), Profile::Default);
        let ws = Value::Text("hap_backend_websocket".into());
        assert_eq!(profile(&ws).unwrap(), Profile::LongLived);
        assert!(profile(&Value::Text("hap_backend_grpc".into())).is_err());
    }

    #[test]
    fn naive_times() {
        let t = Naive::parse("2026-12-01T07:11:44.804128").unwrap();
        assert_eq!(t.as_utc(), 1_796_109_104);
        assert_eq!(Naive::parse("2026-12-01 07:11:44").unwrap(), t);
        for bad in [
            "",
            "2026-13-01T00:00:00",
            "2026-02-30T00:00:00",
            "2026-12-01T25:00:00",
            "2026-12-01T07:11:44Z",
            "2026-12-01T07:11:44.",
            "soon",
            "2026-12-01",
        ] {
            assert!(Naive::parse(bad).is_none(), "{bad:?}");
        }
    }
}
