//! Compiles mlp and the DS-CNN for the Cargo target (`thumbv7em-none-eabihf` → `cortex-m4f`, with
//! `-C target-cpu=cortex-m7` → `cortex-m7`; see `xla_aot::Build`), and for a bare-metal target
//! links with the mps2-an386 linker script of `examples/mcu-app` (flash at 0x0, SRAM at
//! 0x20000000; the weights in their own output section).

fn main() {
    xla_aot::Build::new("../mlp/model.yaml").compile("mlp");
    xla_aot::Build::new("../ds_cnn/model.yaml").compile("ds_cnn");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        let script = format!("{dir}/../mcu-app/mps2-an386.ld");
        println!("cargo:rerun-if-changed={script}");
        println!("cargo:rustc-link-arg-bins=-T{script}");
    }
}
