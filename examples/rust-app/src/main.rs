//! Runs simplenet and mlp, compiled at build time by `build.rs`, through their safe bindings, and
//! mobilenet_block on the CPU and, where there is an NVIDIA GPU and driver, on the GPU.

runtime_min::include_model!("simplenet");
runtime_min::include_model!("mlp");
runtime_min::include_model!("mlp_batched");
runtime_min::include_model!("mobilenet_block");
#[cfg(target_arch = "x86_64")]
runtime_min::include_model!("simplenet_multi");

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32};

/// A kernel profiler counting the kernels of a run (`runtime_min::KernelProfiler`).
struct KernelCounter {
    starts: AtomicU32,
    ends: AtomicU32,
    /// A kernel started while another had not ended.
    nested: AtomicBool,
}

impl runtime_min::KernelProfiler for KernelCounter {
    fn kernel_event(&self, _kernel: u32, phase: u32) {
        if phase == 0 {
            if self.starts.fetch_add(1, Relaxed) != self.ends.load(Relaxed) {
                self.nested.store(true, Relaxed);
            }
        } else {
            self.ends.fetch_add(1, Relaxed);
        }
    }
}

static KERNELS: KernelCounter = KernelCounter {
    starts: AtomicU32::new(0),
    ends: AtomicU32::new(0),
    nested: AtomicBool::new(false),
};
static KERNEL_SINK: &dyn runtime_min::KernelProfiler = &KERNELS;

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

/// simplenet as a multi-ISA library: each variant this CPU runs, forced, against the
/// single-ISA library's `y`.
#[cfg(target_arch = "x86_64")]
fn multi_isa(
    x: &[f32; simplenet::X_LEN],
    y: &[f32; simplenet::Y_LEN],
) -> Result<(), runtime_min::Status> {
    let mut arena = Box::new(simplenet_multi::Arena::<{ simplenet_multi::ARENA_SIZE }>::new());
    let mut ym = [0f32; simplenet_multi::Y_LEN];
    println!("simplenet_multi: selected {}", simplenet_multi::isa());
    for isa in [c"avx512", c"avx2", c"sse2"] {
        if simplenet_multi::force_isa(Some(isa)).is_err() {
            println!("simplenet_multi: {isa:?} refused (this CPU cannot run it)");
            continue;
        }
        simplenet_multi::run(&mut arena, x, &mut ym)?;
        let diff = y
            .iter()
            .zip(&ym)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "simplenet_multi {}: max |y - single-ISA y| {diff:.1e}",
            simplenet_multi::isa()
        );
    }
    assert!(simplenet_multi::force_isa(Some(c"no-such-isa")).is_err());
    simplenet_multi::force_isa(None)
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
    #[cfg(target_arch = "x86_64")]
    multi_isa(&x, &y)?;
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

    // The safe profiler hook: count mlp's kernel calls in one run, then turn it off.
    mlp::set_profiler(Some(&KERNEL_SINK));
    mlp::run(&mut arena, &img, &mut probs)?;
    mlp::set_profiler(None);
    let (starts, ends) = (KERNELS.starts.load(Relaxed), KERNELS.ends.load(Relaxed));
    assert!(
        starts > 0 && starts == ends,
        "{starts} kernel starts, {ends} ends"
    );
    assert!(
        !KERNELS.nested.load(Relaxed),
        "a kernel started inside another"
    );
    mlp::run(&mut arena, &img, &mut probs)?;
    assert_eq!(
        KERNELS.starts.load(Relaxed),
        starts,
        "called after unregistering"
    );
    println!("mlp profiler: {starts} kernel calls in one run, each started and ended once");

    // mlp_batched: three images in one call (the 4-image bucket, padded), each equal to mlp alone.
    let n = 3;
    let images: Vec<f32> = (0..n * mlp::X_LEN)
        .map(|i| ((i % 28) as f32 + (i / mlp::X_LEN) as f32) / 28.0)
        .collect();
    let mut batch_probs = vec![0f32; n * mlp::PROBS_LEN];
    let mut arena = Box::new(mlp_batched::Arena::<{ mlp_batched::ARENA_SIZE }>::new());
    mlp_batched::run_batch(&mut arena, n, &images, &mut batch_probs)?;
    let mut worst = 0f32;
    for k in 0..n {
        let mut one = [0f32; mlp::X_LEN];
        one.copy_from_slice(&images[k * mlp::X_LEN..(k + 1) * mlp::X_LEN]);
        let mut alone = [0f32; mlp::PROBS_LEN];
        let mut a = Box::new(mlp::Arena::<{ mlp::ARENA_SIZE }>::new());
        mlp::run(&mut a, &one, &mut alone)?;
        for (b, s) in batch_probs[k * mlp::PROBS_LEN..].iter().zip(&alone) {
            worst = worst.max((b - s).abs());
        }
    }
    println!(
        "mlp_batched: {n} images in one call (buckets {:?}), at most {worst:.3e} from mlp alone",
        mlp_batched::BATCH_SIZES
    );
    assert!(
        worst < 1e-5,
        "a batched image differs from the image run alone"
    );
    assert_eq!(
        mlp_batched::run_batch(&mut arena, 9, &images, &mut batch_probs),
        Err(runtime_min::Status::BadArgument)
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
