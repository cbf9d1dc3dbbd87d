//! A YAML model spec from arbitrary bytes: parsed, checked and lowered to a verified module, or
//! a positioned error; never a panic, an abort or an unbounded allocation (issue 19).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(source) = std::str::from_utf8(data) {
        let _ = xla_aot::front::spec_from_str(Path::new("fuzz.yaml"), source);
    }
});
