//! The example runs and prints what the models computed (simplenet's summary equals the C
//! example's on the same test pattern).

#[test]
fn rust_app_runs_both_models() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rust-app"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("simplenet y: 16384 values, min 0.000000 max 2.792193 mean 0.375083"),
        "{text}"
    );
    assert!(text.contains("probabilities sum to 1.0000"), "{text}");
    assert!(
        text.contains("kernel calls in one run, each started and ended once"),
        "{text}"
    );
    assert!(
        text.contains("mlp_batched: 3 images in one call (buckets [1, 4, 8]), at most"),
        "{text}"
    );
    assert!(
        text.contains("mobilenet_block probs (CPU): 10 values"),
        "{text}"
    );
    if cfg!(target_arch = "x86_64") {
        assert!(text.contains("simplenet_multi: selected "), "{text}");
        assert!(
            text.contains("simplenet_multi sse2: max |y - single-ISA y|"),
            "{text}"
        );
    }
    // The CUDA bindings: without a driver (CI) init says so; with one the GPU run is compared.
    assert!(
        text.contains("mobilenet_block on the GPU: not used (NoCudaDriver: no CUDA driver")
            || text.contains("mobilenet_block: GPU and CPU differ by at most"),
        "{text}"
    );
}
