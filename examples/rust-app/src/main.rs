//! Runs simplenet and mlp, compiled at build time by `build.rs`, through their safe bindings, and
//! mobilenet_block on the CPU and, where there is an NVIDIA GPU and driver, on the GPU.

runtime_min::include_model!("simplenet");
runtime_min::include_model!("mlp");
runtime_min::include_model!("mobilenet_block");

fn summary(name: &str, v: &[f32]) {
    let (lo, hi) = v
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
    println!(
        "{name}: {} values, min {lo:.6} max {hi:.6} mean {mean:.6}",
        v.len()
    );
}

fn main() -> Result<(), runtime_min::Status> {
    // simplenet: a deterministic test pattern in, the relu(bn(conv(x))) activations out.
    let mut x = [0f32; simplenet::X_LEN];
    for (i, v) in x.iter_mut().enumerate() {
        *v = ((i % 17) as f32 - 8.0) / 8.0;
    }
    let mut y = [0f32; simplenet::Y_LEN];
    let mut arena = Box::new(simplenet::Arena::<{ simplenet::ARENA_SIZE }>::new());
    simplenet::run(&mut arena, &x, &mut y)?;
    summary("simplenet y", &y);

    // mlp: a 784-pixel ramp in, ten class probabilities out.
    let mut img = [0f32; mlp::X_LEN];
    for (i, v) in img.iter_mut().enumerate() {
        *v = (i % 28) as f32 / 28.0;
    }
    let mut probs = [0f32; mlp::PROBS_LEN];
    let mut arena = Box::new(mlp::Arena::<{ mlp::ARENA_SIZE }>::new());
    mlp::run(&mut arena, &img, &mut probs)?;
    let best = probs
        .iter()
        .enumerate()
        .fold(0, |b, (i, &p)| if p > probs[b] { i } else { b });
    summary("mlp probs", &probs);
    println!(
        "mlp: class {best} (p = {:.4}), probabilities sum to {:.6}",
        probs[best],
        probs.iter().sum::<f32>()
    );

    // mobilenet_block: on the CPU, then on the GPU when there is one (the CPU result otherwise).
    let mut x = [0f32; mobilenet_block::X_LEN];
    for (i, v) in x.iter_mut().enumerate() {
        *v = ((i % 13) as f32 - 6.0) / 6.0;
    }
    let mut cpu = [0f32; mobilenet_block::PROBS_LEN];
    let mut arena = Box::new(mobilenet_block::Arena::<{ mobilenet_block::ARENA_SIZE }>::new());
    mobilenet_block::run(&mut arena, &x, &mut cpu)?;
    summary("mobilenet_block probs (CPU)", &cpu);
    let mut gpu = mobilenet_block::cuda::Context::new();
    match gpu.init(0) {
        Ok(()) => {
            let mut probs = [0f32; mobilenet_block::PROBS_LEN];
            gpu.run(&x, &mut probs)?;
            let diff = probs
                .iter()
                .zip(&cpu)
                .fold(0f32, |d, (a, b)| d.max((a - b).abs()));
            summary("mobilenet_block probs (GPU)", &probs);
            println!("mobilenet_block: GPU and CPU differ by at most {diff:.3e}");
        }
        Err(s) => println!(
            "mobilenet_block on the GPU: not used ({s:?}: {})",
            gpu.error_name().to_string_lossy()
        ),
    }
    Ok(())
}
