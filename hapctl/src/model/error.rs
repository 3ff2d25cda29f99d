//! The one error every model parser returns: which field, which value, which rule.

/// A value refused by the model. The message names the field, shows the value (escaped, so
/// control characters are visible) and states the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} {value:?}: {rule}")]
pub struct Invalid {
    pub field: &'static str,
    pub value: String,
    pub rule: String,
}

impl Invalid {
    pub fn new(field: &'static str, value: &str, rule: impl Into<String>) -> Invalid {
        Invalid {
            field,
            value: bounded(value),
            rule: rule.into(),
        }
    }

    /// The same rule, reported against another field name (e.g. `server` inside `domain`).
    pub fn in_field(mut self, field: &'static str) -> Invalid {
        self.field = field;
        self
    }
}

/// At most 80 characters of `value`, so messages stay bounded even for megabyte-long hostile
/// input (print it with `{:?}` so control characters are escaped).
pub fn bounded(value: &str) -> String {
    bounded_to(value, 80)
}

/// At most `max` characters of `value`, and how long it was when cut.
pub fn bounded_to(value: &str, max: usize) -> String {
    if value.chars().count() > max {
        let head: String = value.chars().take(max).collect();
        format!("{head}… ({} bytes)", value.len())
    } else {
        value.to_string()
    }
}

/// Implements `Display`-based `Serialize` and `FromStr`-based `Deserialize` for a newtype, so
/// JSON goes through the same parser as the command line.
macro_rules! serde_via_str {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use serde_via_str;

/// First character that is whitespace or a control character, with its position.
pub(crate) fn find_blank_or_control(s: &str) -> Option<(usize, char)> {
    s.chars()
        .enumerate()
        .find(|(_, c)| c.is_whitespace() || c.is_control() || is_invisible(*c))
}

/// Characters that render as nothing: a name or a key containing one is never what it looks like.
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}')
}

pub(crate) fn describe_char(c: char) -> String {
    if c.is_ascii_graphic() {
        format!("'{c}'")
    } else {
        format!("U+{:04X}", c as u32)
    }
}
