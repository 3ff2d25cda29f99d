//! Runtime API answers (`get map`).
#![no_main]
libfuzzer_sys::fuzz_target!(|text: &str| {
    let _ = hapctl::fuzzing::parse_lookup(text);
});
