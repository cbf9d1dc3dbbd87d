//! Compiles the two example models into static libraries linked into this binary. The xla-aot
//! target follows Cargo's (`--target aarch64-unknown-linux-gnu` gives NEON code).

fn main() {
    xla_aot::Build::new("../simplenet/model.yaml").compile("simplenet");
    xla_aot::Build::new("../mlp/model.yaml").compile("mlp");
}
