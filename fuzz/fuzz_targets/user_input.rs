//! Everything a user types: names, addresses, keys, options, versions, settings.
#![no_main]
use hapctl::model::*;

libfuzzer_sys::fuzz_target!(|text: &str| {
    let _ = text.parse::<Domain>();
    let _ = text.parse::<ServerAddr>();
    let _ = Server::parse_spec(text, ServerName::nth(1));
    let _ = text.parse::<BlockKey>();
    let _ = text.parse::<Profile>();
    let _ = text.parse::<Ttl>();
    let _ = text.parse::<Version>();
    let _ = text.parse::<AppName>();
    let _ = Note::parse("reason", text);
    let dir = std::path::Path::new("/srv/hapctl");
    let _ = hapctl::settings::Settings::parse(dir, &dir.join("hapctl.toml"), text);
});
