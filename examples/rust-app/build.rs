//! Compiles the example models into static libraries linked into this binary. The xla-aot
//! target follows Cargo's (`--target aarch64-unknown-linux-gnu` gives NEON code); mobilenet_block
//! is compiled for the CUDA target of the same CPU (`jetson-orin` on aarch64, `cuda-x86_64`
//! otherwise), so it can also run on an NVIDIA GPU.

fn main() {
    xla_aot::Build::new("../simplenet/model.yaml").compile("simplenet");
    xla_aot::Build::new("../mlp/model.yaml").compile("mlp");
    // The same mlp with batch buckets (`batch_sizes`): `mlp_batched::run_batch`.
    xla_aot::Build::new("mlp_batched.yaml").compile("mlp_batched");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    // On x86-64, simplenet once more as one library for every x86-64 CPU (`x86_64-multi`: AVX-512,
    // AVX2 and SSE2 code, chosen on the first call).
    if arch == "x86_64" {
        xla_aot::Build::new("../simplenet/model.yaml")
            .multi_isa(true)
            .compile("simplenet_multi");
    }
    let gpu = if arch == "aarch64" {
        "jetson-orin"
    } else {
        "cuda-x86_64"
    };
    xla_aot::Build::new("../mobilenet_block/model.yaml")
        .target(gpu)
        .compile("mobilenet_block");
}
