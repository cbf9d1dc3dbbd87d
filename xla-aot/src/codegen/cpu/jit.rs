//! Running CPU code in-process: an optimised, planned module (`crate::compile::optimize`) is built
//! by the same code generator as for `compile` for the `host` target, optimised by LLVM, and
//! executed by LLVM's MCJIT. `crate::compile::run` is the way in (`xla-aot run`, JIT tests).
//!
//! Contract: [`run`] returns one literal per output and the kernels that ran, or an error; it
//! never touches the disk. The arena, inputs and outputs are host buffers with the alignment the
//! C API requires.

use super::build_module;
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

/// Compiles `m` (already optimised, with its plan `p`) for the host and runs it on `inputs` (one
/// per parameter, in order); returns the outputs and the kernels.
pub fn run(
    m: &Module,
    p: &BufferPlan,
    inputs: &[Literal],
) -> Result<(Vec<Literal>, Vec<KernelInfo>), CodegenError> {
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
    for (lit, &pid) in inputs.iter().zip(&params) {
        let shape = &c.inst(pid).shape;
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
        .map(|o| words(c.inst(o.value).shape.size_bytes()))
        .collect();
    let mut arena = vec![Block([0; ARENA_ALIGN]); p.arena_size.div_ceil(ARENA_ALIGN).max(1)];
    let in_ptrs: Vec<*const u8> = in_bufs.iter().map(|b| b.as_ptr() as *const u8).collect();
    let out_ptrs: Vec<*mut u8> = out_bufs
        .iter_mut()
        .map(|b| b.as_mut_ptr() as *mut u8)
        .collect();
    let name = format!("{}_run_ptrs", m.name);
    // SAFETY: the function was generated with exactly this signature (`core/entry.rs`, `entry_points`); the
    // arena holds `arena_size` bytes aligned to 64, every input and output buffer holds the bytes
    // of its shape, and the buffers outlive the call.
    let status = unsafe {
        let f = engine
            .get_function::<RunPtrs>(&name)
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        f.call(
            arena.as_mut_ptr() as *mut u8,
            in_ptrs.as_ptr(),
            out_ptrs.as_ptr(),
        )
    };
    if status != 0 {
        return Err(CodegenError::Llvm(format!(
            "{name} returned status {status}"
        )));
    }
    let outputs = c
        .outputs
        .iter()
        .zip(out_bufs)
        .map(|(o, buf)| {
            let shape = &c.inst(o.value).shape;
            let mut bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
            bytes.truncate(shape.size_bytes());
            Literal {
                dtype: shape.dtype,
                dims: shape.dims.clone(),
                data: LiteralData::Dense(bytes),
            }
        })
        .collect();
    Ok((outputs, kernels))
}
