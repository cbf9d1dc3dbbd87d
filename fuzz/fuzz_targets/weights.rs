//! Weight files from arbitrary bytes: the first byte picks `.npy` (decoded from memory) or
//! `.safetensors` (opened from a file, every tensor loaded); either loads or is an error, never
//! a panic, an abort or an unbounded allocation (issue 19).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xla_aot::front::weights::WeightStore;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick & 1 == 0 {
        let _ = xla_aot::ir::npy::read_npy(rest);
        return;
    }
    let path =
        std::env::temp_dir().join(format!("xla-aot-fuzz-{}.safetensors", std::process::id()));
    if std::fs::write(&path, rest).is_err() {
        return;
    }
    if let Ok(store) = WeightStore::open(&path) {
        let names: Vec<String> = store.names().map(str::to_string).collect();
        for n in names {
            let _ = store.load(&n);
        }
    }
});
