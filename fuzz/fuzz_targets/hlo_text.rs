//! XLA HLO text from arbitrary bytes: imported to a verified module or a positioned error;
//! never a panic, an abort or an unbounded allocation (issue 19).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use xla_aot::front::weights::{Bindings, WeightStore};

fuzz_target!(|data: &[u8]| {
    if let Ok(source) = std::str::from_utf8(data) {
        let weights = WeightStore::empty();
        let mut bindings = Bindings::new(&weights);
        if let Ok(m) =
            xla_aot::front::hlo_text::import(Path::new("fuzz.hlo"), source, "fuzz", &mut bindings)
        {
            let _ = xla_aot::ir::verify(&m);
        }
    }
});
