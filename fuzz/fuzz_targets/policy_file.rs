//! A policy file in YAML, TOML or JSON (the first byte chooses), `${VAR}`
//! expansion included: every input is a file or an error naming what was
//! wrong, never a panic, and a file read builds its limiters.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::MemoryBackend;
use tollgate_config::{Format, PolicyFile};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let format = match which % 3 {
        0 => Format::Yaml,
        1 => Format::Toml,
        _ => Format::Json,
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match PolicyFile::from_str(text, format, "fuzz") {
        Ok(file) => {
            // A file that reads builds: its mistakes are the reader's to
            // name, not the builder's.
            if let Err(err) = file.limiters_builder(MemoryBackend::new()).build() {
                panic!("a file that reads did not build: {err}");
            }
        }
        Err(err) => assert!(!err.to_string().is_empty()),
    }
});
