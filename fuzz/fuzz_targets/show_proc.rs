//! `show proc` answers from the master socket.
#![no_main]
libfuzzer_sys::fuzz_target!(|text: &str| {
    if let Ok(list) = hapctl::haproxy::ProcList::parse(text) {
        let _ = list.all_worker_pids();
    }
});
