//! The shared LLVM lowering core: what both backends need, and nothing that tells them apart.
//!
//! Contract: nothing under `core` names `cpu` or `gpu`; the backends (`codegen/cpu`,
//! `codegen/gpu`) depend on it and never on each other. The parts:
//! - [`target`]: LLVM initialisation, target machines, function attributes, the O3 pipeline.
//! - [`emitter`]: [`Emitter`], one module's builder and model with types, constants, memory
//!   accesses, loops and scalar helpers, generic over the backend's state; [`Backend`] is all
//!   shared code asks of a backend (which elements an invocation computes, how a kernel is
//!   built and invoked). There is no mode flag: a backend is a type.
//! - [`elemental`]: one element of elementwise ops and fused expressions ([`fixed_point`]: its
//!   `multiply-q31`, on scalars or vector lanes); [`concat_runs`]:
//!   innermost loops split where a concatenation changes operand, so each run reads one.
//! - [`outer_split`]: a kernel body's outermost loop split between the tasks of a thread hook.
//! - [`ops`]: kernel bodies with no backend choice (reductions, argmax, elementwise, the
//!   shared parts of fusions); [`sample`]: the decode-time ops `top-k` and `sample`.
//! - [`layout`]: strides, re-laying constants, the matrix-product view of a dot.
//! - [`packing`]: THE place that decides how each constant is stored (packed panels, a
//!   Winograd-transformed kernel, or its layout), for the CPU, the GPU and the JIT alike;
//!   [`tiles`]: the micro-kernels' register and cache tiles per target; [`winograd`]: the
//!   `F(m×m, 3×3)` transforms and which convolutions take them.
//! - [`module`], [`entry`], [`profiler`], [`object`]: a module's constants and kernel list, the
//!   C API entry points of a host library, its kernel profiler hook, and writing a host object.
//! - [`math`]: the inline approximations of transcendental functions.
//! - [`weights`]: the large constants a host library stores in a data object, not in LLVM.

pub mod boundary;
pub mod canary;
pub mod concat_runs;
pub mod elemental;
pub mod emitter;
pub mod entry;
pub mod fixed_point;
pub mod half_round;
pub mod layout;
pub mod math;
pub mod math_budget;
pub mod module;
pub mod object;
pub mod ops;
pub mod outer_split;
pub mod overlap;
pub mod packing;
pub mod profiler;
pub mod sample;
pub mod target;
pub mod tiles;
pub mod weights;
pub mod weights_arg;
pub mod weights_blob;
pub mod winograd;

pub use emitter::{Backend, Emitter, Ix, Kernel, KernelAbi};
pub use object::{CpuObject, Options};
pub use target::{optimize, target_machine};

use thiserror::Error;

/// Why code could not be generated.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CodegenError {
    /// The target is not available in this LLVM.
    #[error("LLVM cannot generate code for {triple} ({cpu}): {reason}")]
    Target {
        triple: String,
        cpu: String,
        reason: String,
    },
    /// Something in the module the code generator (CPU or GPU) does not implement.
    #[error("the code generator cannot compile %{inst}: {reason}")]
    Unsupported { inst: String, reason: String },
    /// LLVM rejected the generated IR (a compiler bug).
    #[error("internal compiler error: LLVM rejected the generated code: {0}")]
    Llvm(String),
}

/// One generated kernel, for the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// Symbol of the (internal) kernel function.
    pub name: String,
    /// The HLO instructions it computes.
    pub ops: Vec<String>,
    /// Bytes of activations (inputs and intermediates) it reads, each operand once.
    pub reads: usize,
    /// Bytes of weights and constants it reads.
    pub weight_reads: usize,
    /// Bytes it writes.
    pub writes: usize,
    /// Floating-point operations per run (`ir::flops`).
    pub flops: u64,
    /// The entry constants it reads (instruction indices, aliases followed), each once: where
    /// its read-only data comes from (`emit/kernel_rodata.rs`).
    pub constants: Vec<u32>,
}
