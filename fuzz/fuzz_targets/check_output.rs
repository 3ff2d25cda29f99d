//! `haproxy -c` output (exit code, stdout, stderr) and log text.
#![no_main]
libfuzzer_sys::fuzz_target!(|input: (i32, &str, &str)| {
    let (code, stdout, stderr) = input;
    let _ = hapctl::fuzzing::check_output(code, stdout, stderr);
    let _ = hapctl::fuzzing::haproxy_messages(stderr);
});
