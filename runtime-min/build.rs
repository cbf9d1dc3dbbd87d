//! Generates runtime-min's C header with cbindgen into OUT_DIR; `tests/header.rs` checks that the
//! committed `include/xla_aot_runtime.h` is identical (and rewrites it with XLA_AOT_BLESS=1).

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("xla_aot_runtime.h");
    let config =
        cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the runtime header")
        .write_to_file(out);
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
}
