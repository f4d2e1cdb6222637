//! An Envoy rate-limit configuration file: every input is a file or an
//! error naming the line and field of its first mistake, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_config::envoy::EnvoyFile;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(err) = EnvoyFile::parse(text, "fuzz") {
        assert!(!err.to_string().is_empty());
    }
});
