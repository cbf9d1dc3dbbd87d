//! `xla-aot profile`: where a model's time goes, kernel by kernel, on this machine.
//!
//! Contract: the model is compiled for the host through the one compile path
//! (`compile::profile`: `compile::optimize`, then the CPU code generator and the JIT) and run
//! in-process; the library's own profiler hook (`<name>_set_profiler`, `codegen/core/profiler.rs`)
//! times every kernel. Kernels are numbered and named as in the manifest. Each figure is the
//! median over the runs (the minimum is printed beside the whole call), or with `--min` the
//! minimum (a machine shared with other work). A kernel is called
//! compute-bound when its arithmetic intensity (flops per byte read or written) reaches the
//! ridge point peak / [`PEAK_GBPS`], memory-bound below it; `% roof` is its speed against the
//! roof that bounds it. The compute peak is measured on the spot (independent vector FMA chains
//! through the JIT, `codegen/cpu/peak.rs`); the memory roof is a named constant. With
//! `--threads N` the runs lend the library N threads through its parallel-for hook (an
//! in-process pool, `codegen/cpu/pool.rs`); the roofline stays one core's. The last profiled
//! run is kept as a [`Trace`], which `timeline.rs` draws as an SVG (`--dump-to`).

pub use crate::codegen::cpu::jit::Trace;
use crate::driver::{DriverError, check_passes, gather_inputs};
use crate::front::{InputOverrides, load_spec_with};
use std::fmt::Write as _;
use std::path::Path;

/// Memory roof of the roofline: the mlp streaming its weights from L3 on the AVX-512 machine of
/// 2026-11-29 (docs/performance.md, "What limits each kernel"); working sets that fit L2 go
/// faster. A constant: a bandwidth measured in a second on a shared VM says more about the
/// neighbours than about the machine.
pub const PEAK_GBPS: f64 = 95.0;

/// Options of `xla-aot profile`.
#[derive(Debug, Clone)]
pub struct ProfileRequest {
    /// `NAME=FILE.npy` inputs; the others are seeded random.
    pub inputs: Vec<String>,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Timed runs (after one untimed run).
    pub runs: usize,
    /// Passes to skip.
    pub disabled_passes: Vec<String>,
    /// Keep 3×3 convolutions direct (`CompileOptions::no_winograd`).
    pub no_winograd: bool,
    /// The weights' precision (`CompileOptions::precision`).
    pub precision: Option<crate::ir::Precision>,
    /// Report each kernel's fastest run instead of its median (on a machine shared with other
    /// work, the minimum is what the kernel costs when nothing preempts it).
    pub by_min: bool,
    /// Input shapes, dims and frozen inputs fixed as for `compile` (`--input-shape`, `--dim`,
    /// `--freeze`).
    pub fixed: InputOverrides,
    /// Threads lent to the library through its parallel-for hook (1: none).
    pub threads: usize,
}

/// One kernel's line of the report.
#[derive(Debug, Clone)]
pub struct KernelLine {
    /// Index in the manifest's `kernels`.
    pub index: usize,
    pub name: String,
    pub ops: Vec<String>,
    /// Median and minimum over the runs, in microseconds.
    pub median_us: f64,
    pub min_us: f64,
    pub flops: u64,
    /// Bytes read (activations and weights) and written.
    pub bytes: usize,
}

/// What `xla-aot profile` measured.
#[derive(Debug, Clone)]
pub struct ProfileReport {
    pub model: String,
    pub runs: usize,
    pub kernels: Vec<KernelLine>,
    /// Median and minimum of the whole call without a profiler registered, in microseconds.
    pub call_median_us: f64,
    pub call_min_us: f64,
    /// Median of the whole call with the profiler registered.
    pub profiled_call_median_us: f64,
    /// The measured single-core fp32 FMA peak, GFLOP/s.
    pub peak_gflops: f64,
    /// Kernel figures are minimums ([`ProfileRequest::by_min`]), not medians.
    pub by_min: bool,
    /// Threads the runs used (the caller included).
    pub threads: usize,
    /// The last profiled run on a time axis (`timeline.rs` draws it).
    pub trace: Trace,
}

/// Median of `xs` (nanoseconds) in microseconds; 0 for none.
fn median_us(xs: &[u64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_unstable();
    let n = v.len();
    let m = if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    };
    m / 1000.0
}

fn min_us(xs: &[u64]) -> f64 {
    xs.iter().min().copied().unwrap_or(0) as f64 / 1000.0
}

/// Profiles the model at `spec` on this machine.
pub fn profile(spec: &Path, req: &ProfileRequest) -> Result<ProfileReport, DriverError> {
    check_passes(&req.disabled_passes)?;
    let model = load_spec_with(spec, &req.fixed)?;
    let (lits, _) = gather_inputs(&model.module, &req.inputs, req.seed)?;
    let opts = crate::compile::CompileOptions {
        disabled_passes: req.disabled_passes.clone(),
        no_winograd: req.no_winograd,
        precision: req.precision,
        ..crate::compile::CompileOptions::default()
    };
    let runs = req.runs.max(1);
    let threads = req.threads.max(1);
    let (run, t) = crate::compile::profile(&model.module, &lits, &opts, runs, threads)?;
    let peak_gflops = crate::codegen::cpu::peak::fma_peak_gflops()?;
    let kernels = run
        .kernels
        .iter()
        .zip(&t.kernels)
        .enumerate()
        .map(|(index, (k, times))| KernelLine {
            index,
            name: k.name.clone(),
            ops: k.ops.clone(),
            median_us: median_us(times),
            min_us: min_us(times),
            flops: k.flops,
            bytes: k.reads + k.weight_reads + k.writes,
        })
        .collect();
    Ok(ProfileReport {
        model: model.module.name.clone(),
        runs,
        kernels,
        call_median_us: median_us(&t.calls),
        call_min_us: min_us(&t.calls),
        profiled_call_median_us: median_us(&t.profiled_calls),
        peak_gflops,
        by_min: req.by_min,
        threads,
        trace: t.trace,
    })
}

impl KernelLine {
    /// Whether the kernel's arithmetic intensity reaches the ridge point of a `peak` GFLOP/s
    /// machine.
    pub fn compute_bound(&self, peak: f64) -> bool {
        self.flops as f64 >= self.bytes as f64 * peak / PEAK_GBPS
    }

    /// The kernel's time: its minimum when `by_min`, else its median.
    fn us(&self, by_min: bool) -> f64 {
        if by_min { self.min_us } else { self.median_us }
    }

    fn gflops(&self, by_min: bool) -> f64 {
        self.flops as f64 / (self.us(by_min) * 1e3).max(1e-3)
    }

    fn gbps(&self, by_min: bool) -> f64 {
        self.bytes as f64 / (self.us(by_min) * 1e3).max(1e-3)
    }
}

impl ProfileReport {
    /// Sum of the kernels' medians (minimums when `by_min`), in microseconds.
    pub fn kernels_us(&self) -> f64 {
        self.kernels.iter().map(|k| k.us(self.by_min)).sum()
    }

    /// The report as a text table.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let total = self.kernels_us();
        let _ = writeln!(
            s,
            "{}: {} kernel(s), {} run(s) on this machine, {} thread(s); roofline: {:.1} GFLOP/s \
             (measured FMA peak, one core), {PEAK_GBPS} GB/s (named constant \
             xla_aot::profile::PEAK_GBPS)",
            self.model,
            self.kernels.len(),
            self.runs,
            self.threads,
            self.peak_gflops
        );
        let _ = writeln!(
            s,
            "{:>3}  {:<40} {:>9} {:>6} {:>8} {:>7} {:>8} {:>7}  ops",
            "#", "kernel", "µs", "share", "GFLOP/s", "GB/s", "bound", "% roof"
        );
        let m = self.by_min;
        for k in &self.kernels {
            let peak = self.peak_gflops;
            let roof = if k.compute_bound(peak) {
                peak
            } else {
                PEAK_GBPS * k.flops as f64 / k.bytes.max(1) as f64
            };
            let pct = if k.flops == 0 {
                100.0 * k.gbps(m) / PEAK_GBPS
            } else {
                100.0 * k.gflops(m) / roof
            };
            let mut ops = k.ops.join(",");
            if ops.len() > 48 {
                ops.truncate(45);
                ops.push_str("...");
            }
            let _ = writeln!(
                s,
                "{:>3}  {:<40} {:>9.2} {:>5.1}% {:>8.1} {:>7.1} {:>8} {:>6.0}%  {}",
                k.index,
                k.name,
                k.us(m),
                100.0 * k.us(m) / total.max(1e-9),
                k.gflops(m),
                k.gbps(m),
                if k.compute_bound(peak) {
                    "compute"
                } else {
                    "memory"
                },
                pct,
                ops
            );
        }
        let _ = writeln!(
            s,
            "kernels {total:.2} µs ({}); whole call {:.2} µs median ({:.2} min) without the profiler, \
             {:.2} µs with it",
            if m { "minimums" } else { "medians" },
            self.call_median_us,
            self.call_min_us,
            self.profiled_call_median_us
        );
        s
    }
}
