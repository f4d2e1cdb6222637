//! A trace for `tollgate simulate`: CSV, or an nginx/common access log (the
//! first byte chooses), read strictly and skipping invalid lines. Every
//! input is a trace or an error naming its line, never a panic, and the
//! reader's buffer size never changes what is read: the input read through
//! a 7-byte buffer gives the same trace, or the same error, as read whole.
//!
//! The readers are the command's own modules, compiled in here from their
//! files (the command is a binary crate, with no library to link).

#![no_main]
#![allow(dead_code, unused_imports)]

use std::io::BufReader;

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tollgate-cli/src/shown.rs"]
mod shown;
#[path = "../../crates/tollgate-cli/src/trace/mod.rs"]
mod trace;

fuzz_target!(|data: &[u8]| {
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    let read = |skip_invalid: bool, buffer: Option<usize>| match (which % 2, buffer) {
        (0, None) => trace::csv::read(input, skip_invalid),
        (0, Some(n)) => trace::csv::read(BufReader::with_capacity(n, input), skip_invalid),
        (_, None) => trace::access_log::read(input, skip_invalid),
        (_, Some(n)) => trace::access_log::read(BufReader::with_capacity(n, input), skip_invalid),
    };
    for skip_invalid in [false, true] {
        let whole = read(skip_invalid, None);
        assert_eq!(whole, read(skip_invalid, Some(7)), "the buffer size changed the read");
        match &whole {
            Ok(trace) => {
                for request in &trace.requests {
                    assert!(request.key < trace.keys.len());
                    assert!(request.resource.is_none_or(|r| r < trace.resources.len()));
                    assert!(!trace.time(request).is_empty());
                }
                if !skip_invalid {
                    assert_eq!(trace.skipped.count, 0);
                }
            }
            Err(err) => {
                assert!(!err.to_string().is_empty());
                if let Some(line) = err.line {
                    assert!(line >= 1);
                }
            }
        }
    }
    // A strict read that succeeds skips nothing when skipping.
    if let Ok(strict) = read(false, None) {
        assert_eq!(Ok(strict), read(true, None));
    }
});
