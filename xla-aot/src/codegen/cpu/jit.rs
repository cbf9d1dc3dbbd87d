//! Running CPU code in-process: an optimised, planned module (`crate::compile::optimize`) is built
//! by the same code generator as for `compile` for the `host` target, optimised by LLVM, and
//! executed by LLVM's MCJIT. `crate::compile::run` is the way in (`xla-aot run`, JIT tests).
//!
//! Contract: [`run`] returns one literal per output and the kernels that ran, or an error; it
//! never touches the disk. [`profile`] also times repeated runs, each kernel through the
//! library's own profiler hook (`<name>_set_profiler`, `core/profiler.rs`) and the whole call
//! with and without it, on one thread or on a [`SpinPool`] lent through the library's
//! parallel-for hook. The arena, inputs and outputs are host buffers with the alignment the
//! C API requires.

use super::build_module;
use super::pool::{ParallelFor, SpinPool, TaskSpan};
use crate::arena::{ARENA_ALIGN, BufferPlan};
use crate::codegen::core::target::{init_llvm, optimize, target_machine};
use crate::codegen::core::{CodegenError, KernelInfo};
use crate::ir::{Literal, LiteralData, Module};
use crate::target::Target;
use inkwell::OptimizationLevel;
use inkwell::context::Context;

/// One arena-aligned block of bytes.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; ARENA_ALIGN]);

type RunPtrs = unsafe extern "C" fn(*mut u8, *const *const u8, *const *mut u8) -> i32;

/// Per-kernel and whole-call times of [`profile`], in nanoseconds, one entry per run.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// `kernels[k][r]`: kernel `k` (manifest order) in profiled run `r`, from the hook's phase 0
    /// to its phase 1.
    pub kernels: Vec<Vec<u64>>,
    /// Whole `<name>_run_ptrs` calls with the profiler registered, one per profiled run.
    pub profiled_calls: Vec<u64>,
    /// Whole `<name>_run_ptrs` calls with no profiler registered, interleaved with the profiled
    /// runs (what the library costs an app that does not profile).
    pub calls: Vec<u64>,
    /// The last profiled run, kernel by kernel and task by task.
    pub trace: Trace,
}

/// One profiled run on a time axis (nanoseconds from one origin): each kernel's start and end on
/// the calling thread, and, with threads, each task of a split kernel on its thread.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Threads the run used (the caller included).
    pub threads: usize,
    /// `kernels[k]`: kernel `k`'s (start, end).
    pub kernels: Vec<(u64, u64)>,
    /// The tasks of the kernels split through the parallel-for hook.
    pub tasks: Vec<TaskSpan>,
}

/// Compiles `m` (already optimised, with its plan `p`) for the host and runs it on `inputs` (one
/// per parameter, in order); returns the outputs and the kernels.
pub fn run(
    m: &Module,
    p: &BufferPlan,
    inputs: &[Literal],
) -> Result<(Vec<Literal>, Vec<KernelInfo>), CodegenError> {
    let (outputs, kernels, _) = profile(m, p, inputs, 0, 1)?;
    Ok((outputs, kernels))
}

/// What the profiler hook writes: the time of every phase of every kernel of the current run.
struct Clock {
    start: std::time::Instant,
    /// `stamps[2k + phase]`, nanoseconds since `start`.
    stamps: Vec<u64>,
}

/// The profiler hook (`XlaAotProfiler`): records the time of (kernel, phase).
extern "C" fn record(ctx: *mut std::ffi::c_void, kernel: u32, phase: u32) {
    // SAFETY: `profile` registers this hook with a pointer to a `Clock` that outlives every run,
    // and runs on this thread only; the library calls it with kernel < the number of kernels.
    let clock = unsafe { &mut *(ctx as *mut Clock) };
    let i = 2 * kernel as usize + phase as usize;
    if let Some(s) = clock.stamps.get_mut(i) {
        *s = clock.start.elapsed().as_nanos() as u64;
    }
}

type SetParallelFor = unsafe extern "C" fn(Option<ParallelFor>, *mut std::ffi::c_void, u32);

type SetProfiler = unsafe extern "C" fn(
    Option<extern "C" fn(*mut std::ffi::c_void, u32, u32)>,
    *mut std::ffi::c_void,
);

/// [`run`], then `runs` more runs alternating a call with no profiler registered and one with
/// the profiler hook of `<name>_set_profiler` recording every kernel; returns the first run's
/// outputs, the kernels and the times. With `threads > 1`, every run lends the library a
/// [`SpinPool`] of that many threads through `<name>_set_parallel_for`.
pub fn profile(
    m: &Module,
    p: &BufferPlan,
    inputs: &[Literal],
    runs: usize,
    threads: usize,
) -> Result<(Vec<Literal>, Vec<KernelInfo>, Timings), CodegenError> {
    init_llvm();
    let target = Target::resolve("host").map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let tm = target_machine(&target)?;
    let ctx = Context::create();
    let (module, kernels) = build_module(&ctx, &tm, m, p, &target)?;
    optimize(&module, &tm)?;
    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Default)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let c = &m.entry;
    let params = c.parameters();
    if inputs.len() != params.len() {
        return Err(CodegenError::Llvm(format!(
            "{} inputs for {} parameters",
            inputs.len(),
            params.len()
        )));
    }
    // 4-byte aligned copies of the inputs, zeroed outputs, one 64-byte aligned arena.
    let words = |bytes: usize| vec![0u32; bytes.div_ceil(4).max(1)];
    let mut in_bufs: Vec<Vec<u32>> = Vec::new();
    for (k, (lit, &pid)) in inputs.iter().zip(&params).enumerate() {
        // Inputs in the C API's dtype (`ir/api.rs`); one given in the IR dtype is converted first.
        let mut shape = c.inst(pid).shape.clone();
        shape.dtype = m.input_dtype(k);
        let converted;
        let lit = if lit.dtype != shape.dtype && lit.dtype == c.inst(pid).shape.dtype {
            converted = crate::ir::api::to_api(lit, shape.dtype);
            &converted
        } else {
            lit
        };
        let bytes = lit.bytes().unwrap_or_default();
        if lit.dtype != shape.dtype || lit.dims != shape.dims || bytes.len() != shape.size_bytes() {
            return Err(CodegenError::Llvm(format!(
                "input %{} does not match {}",
                c.inst(pid).name,
                shape
            )));
        }
        let mut w = words(bytes.len());
        for (i, b) in bytes.iter().enumerate() {
            w[i / 4] |= (*b as u32) << (8 * (i % 4));
        }
        in_bufs.push(w);
    }
    let mut out_bufs: Vec<Vec<u32>> = c
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| words(c.inst(o.value).shape.element_count() * m.output_dtype(k).size_bytes()))
        .collect();
    let mut arena = vec![Block([0; ARENA_ALIGN]); p.arena_size.div_ceil(ARENA_ALIGN).max(1)];
    let in_ptrs: Vec<*const u8> = in_bufs.iter().map(|b| b.as_ptr() as *const u8).collect();
    let out_ptrs: Vec<*mut u8> = out_bufs
        .iter_mut()
        .map(|b| b.as_mut_ptr() as *mut u8)
        .collect();
    let name = format!("{}_run_ptrs", m.name);
    let llvm =
        |e: inkwell::execution_engine::FunctionLookupError| CodegenError::Llvm(e.to_string());
    // SAFETY: the functions were generated with exactly these signatures (`core/entry.rs`,
    // `core/profiler.rs`).
    let (f, set_profiler, set_parallel_for) = unsafe {
        (
            engine.get_function::<RunPtrs>(&name).map_err(llvm)?,
            engine
                .get_function::<SetProfiler>(&format!("{}_set_profiler", m.name))
                .map_err(llvm)?,
            engine
                .get_function::<SetParallelFor>(&format!("{}_set_parallel_for", m.name))
                .map_err(llvm)?,
        )
    };
    let pool = (threads > 1).then(|| SpinPool::new(threads));
    if let Some(pool) = &pool {
        let (hook, ctx) = pool.hook();
        // SAFETY: the hook keeps the parallel-for contract (`pool.rs`) and the pool outlives
        // every run; it is unregistered before the pool is dropped.
        unsafe { set_parallel_for.call(Some(hook), ctx, pool.threads() as u32) };
    }
    // SAFETY: the arena holds `arena_size` bytes aligned to 64, every input and output buffer
    // holds the bytes of its shape, and the buffers outlive the calls.
    let arena_ptr = arena.as_mut_ptr() as *mut u8;
    let call = || unsafe { f.call(arena_ptr, in_ptrs.as_ptr(), out_ptrs.as_ptr()) };
    let status = call();
    if status != 0 {
        // SAFETY: a null hook unregisters the pool before it is dropped.
        unsafe { set_parallel_for.call(None, std::ptr::null_mut(), 0) };
        return Err(CodegenError::Llvm(format!(
            "{name} returned status {status}"
        )));
    }
    let outputs: Vec<Literal> = c
        .outputs
        .iter()
        .zip(&out_bufs)
        .enumerate()
        .map(|(k, (o, buf))| {
            let mut shape = c.inst(o.value).shape.clone();
            shape.dtype = m.output_dtype(k);
            let mut bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
            bytes.truncate(shape.size_bytes());
            Literal {
                dtype: shape.dtype,
                dims: shape.dims.clone(),
                data: LiteralData::Dense(bytes.into()),
            }
        })
        .collect();
    let mut clock = Clock {
        start: std::time::Instant::now(),
        stamps: vec![0; 2 * kernels.len()],
    };
    let mut t = Timings {
        kernels: vec![Vec::with_capacity(runs); kernels.len()],
        ..Timings::default()
    };
    let clock_ptr = &mut clock as *mut Clock as *mut std::ffi::c_void;
    for _ in 0..runs {
        let t0 = std::time::Instant::now();
        call();
        t.calls.push(t0.elapsed().as_nanos() as u64);
        // SAFETY: `record` matches `XlaAotProfiler`; `clock` outlives the run, after which the
        // hook is unregistered again.
        unsafe { set_profiler.call(Some(record), clock_ptr) };
        if let Some(pool) = &pool {
            pool.trace(Some(clock.start));
        }
        let t0 = std::time::Instant::now();
        call();
        t.profiled_calls.push(t0.elapsed().as_nanos() as u64);
        if let Some(pool) = &pool {
            t.trace.tasks = pool.spans();
            pool.trace(None);
        }
        // SAFETY: as above; a null hook turns profiling off.
        unsafe { set_profiler.call(None, std::ptr::null_mut()) };
        // SAFETY: the hook no longer runs; `clock` is only read here.
        let stamps = unsafe { &(*(clock_ptr as *mut Clock)).stamps };
        for (k, times) in t.kernels.iter_mut().enumerate() {
            times.push(stamps[2 * k + 1].saturating_sub(stamps[2 * k]));
        }
        t.trace.kernels = (0..kernels.len())
            .map(|k| (stamps[2 * k], stamps[2 * k + 1]))
            .collect();
    }
    t.trace.threads = pool.as_ref().map_or(1, |p| p.threads());
    // SAFETY: a null hook unregisters the pool before it is dropped.
    unsafe { set_parallel_for.call(None, std::ptr::null_mut(), 0) };
    Ok((outputs, kernels, t))
}
