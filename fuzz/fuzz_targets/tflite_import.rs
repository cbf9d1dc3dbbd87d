//! A TFLite flatbuffer from arbitrary bytes: imported to a verified module or an error naming the
//! operator, tensor or buffer; never a panic, an abort or an unbounded allocation (issue 19).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use xla_aot::front::inputs::InputOverrides;
use xla_aot::front::weights::{Bindings, WeightStore};

fuzz_target!(|data: &[u8]| {
    let weights = WeightStore::empty();
    let mut bindings = Bindings::new(&weights);
    if let Ok(m) = xla_aot::front::tflite::import(
        Path::new("fuzz.tflite"),
        data,
        "fuzz",
        &mut bindings,
        &InputOverrides::default(),
    ) {
        let _ = xla_aot::ir::verify(&m);
    }
});
