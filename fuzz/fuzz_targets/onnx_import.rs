//! A serialised ONNX model from arbitrary bytes: imported and verified, or an error naming the
//! node; never a panic, an abort or an unbounded allocation (issue 19).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use xla_aot::front::onnx::{ImportOptions, import_file_with};

fuzz_target!(|data: &[u8]| {
    let _ = import_file_with(
        Path::new("fuzz.onnx"),
        data,
        "fuzz",
        &ImportOptions::default(),
    );
});
