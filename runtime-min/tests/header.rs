//! The committed C header must be what cbindgen generates from the current source.

#[test]
fn committed_header_is_current() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/xla_aot_runtime.h"));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/xla_aot_runtime.h");
    if std::env::var_os("XLA_AOT_BLESS").is_some() {
        std::fs::write(path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/xla_aot_runtime.h is stale: run `XLA_AOT_BLESS=1 cargo test -p runtime-min` and commit it"
    );
}
