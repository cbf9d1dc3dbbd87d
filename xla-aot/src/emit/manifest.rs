//! The manifest `<name>.json`: what the library contains, for tools and tests.
//!
//! Contract: field order is fixed (serde struct order) and values are deterministic.

use crate::arena::{ARENA_ALIGN, BufferPlan};
use crate::codegen::KernelInfo;
use crate::ir::Module;
use serde::Serialize;

#[derive(Serialize)]
pub struct Tensor {
    pub name: String,
    /// The element type the C caller passes or receives.
    pub dtype: String,
    pub shape: Vec<usize>,
    /// The element type the model computes in, where it differs from `dtype` (`ir/api.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub computed_as: Option<String>,
}

#[derive(Serialize)]
pub struct Buffer {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub live: [usize; 2],
}

/// A value its kernel writes straight into its slice of a concatenation's buffer
/// (`arena/concat_views.rs`): it has no buffer of its own, and the concatenation no kernel.
#[derive(Serialize)]
pub struct Slice {
    pub name: String,
    pub of: String,
    pub offset: usize,
    pub size: usize,
}

#[derive(Serialize)]
pub struct Kernel {
    pub name: String,
    pub ops: Vec<String>,
    /// Bytes of activations read (inputs and intermediates).
    pub reads: usize,
    /// Bytes of weights read.
    pub weight_reads: usize,
    /// Bytes written.
    pub writes: usize,
    /// Floating-point operations per run (a multiply-add counts 2).
    pub flops: u64,
    /// A microcontroller library: bytes of code of the kernel (`footprint.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_bytes: Option<u64>,
    /// A microcontroller library: bytes of the constants only this kernel reads (its packed
    /// weights and tables; `kernel_rodata.rs`: those several kernels read are the memory's
    /// `rodata_shared`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rodata_bytes: Option<u64>,
}

#[derive(Serialize)]
pub struct Manifest {
    pub name: String,
    pub target: String,
    pub compiler: String,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    pub arena_size: usize,
    pub arena_align: usize,
    pub arena_lower_bound: usize,
    pub arena_efficiency: f64,
    /// The buffer-placement strategy that gave the smallest arena.
    pub arena_strategy: String,
    /// Bytes of weights as stored (half-precision weights count 2 bytes per value).
    pub weights_bytes: usize,
    /// The weights' precision (`ir/precision.rs`): `f32`, `f16-weights`, `bf16-weights`, `bf16` or `f16`.
    pub precision: String,
    pub hlo_instructions: usize,
    pub hlo_instructions_before_fusion: usize,
    pub kernel_count: usize,
    /// Activation bytes read and written by all kernels (weights excluded): the memory traffic
    /// fusion reduces.
    pub activation_traffic: usize,
    /// Floating-point operations per run, all kernels (what GFLOP/s figures divide by).
    pub flops: u64,
    pub buffers: Vec<Buffer>,
    /// Absent when no concatenation is assembled in place.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<Slice>,
    pub kernels: Vec<Kernel>,
    /// The GPU side of a CUDA target (absent for CPU targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<Cuda>,
    /// A microcontroller library's flash and RAM bytes (`footprint.rs`; absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// The variants of a multi-ISA library (`x86_64-multi`), best first; absent otherwise. The
    /// fields above describe the first one (its kernels, the profiler's kernel indices when it
    /// runs); the arena is the largest variant's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isa_variants: Option<Vec<IsaVariant>>,
    /// `--weights external`: the blob every run takes; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_blob: Option<WeightsBlob>,
}

/// The blob of a library built with `--weights external` (`codegen/core/weights_blob.rs`): the
/// first argument, `weights`, of `<name>_run` and `<name>_run_ptrs`.
#[derive(Serialize)]
pub struct WeightsBlob {
    /// `<name>.weights`, written beside the library.
    pub file: String,
    pub bytes: usize,
    /// The FNV-1a-64 of the bytes after its 64-byte header, as `0x` and 16 hex digits (what
    /// `<name>_check_weights` verifies).
    pub checksum: String,
    /// The run functions' parameter that takes it (their first).
    pub run_argument: String,
}

/// The manifest's `weights_blob` for model `name`'s blob `blob`.
pub fn weights_blob(name: &str, blob: &[u8]) -> WeightsBlob {
    let sum = blob
        .get(16..24)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    WeightsBlob {
        file: format!("{name}.weights"),
        bytes: blob.len(),
        checksum: format!("0x{sum:016x}"),
        run_argument: "weights".into(),
    }
}

/// The manifest's `memory`: the footprint, its flash and RAM sums, and the weights' section.
#[derive(Serialize)]
pub struct Memory {
    #[serde(flatten)]
    pub footprint: super::footprint::Footprint,
    pub flash: u64,
    pub ram: u64,
    pub weights_section: String,
    /// Of `rodata`: the constants two or more kernels read (counted here, once, not in their
    /// kernels' `rodata_bytes`).
    pub rodata_shared: u64,
    /// Of `rodata`: alignment padding, unwind tables and what no kernel reads. The kernels'
    /// `rodata_bytes` + `rodata_shared` + `rodata_other` = `rodata`.
    pub rodata_other: u64,
}

/// One variant of a multi-ISA library (`compile/multi.rs`).
#[derive(Serialize)]
pub struct IsaVariant {
    /// What `<name>_isa()` returns when it runs, and `<name>_force_isa()` takes.
    pub isa: String,
    /// The single-ISA target it is compiled as.
    pub target: String,
    pub kernel_count: usize,
    /// The arena this variant needs (the library's is the largest).
    pub arena_size: usize,
    /// Bytes of all its constants (weights and tables) as its kernels read them.
    pub weight_bytes: usize,
    /// Of those, the bytes stored for this variant alone: constants whose stored bytes differ
    /// from every earlier variant's (vector-width-dependent tiles; all of them with batch
    /// buckets). The rest are stored once, with the earlier variant (`compile/multi_weights.rs`).
    pub weight_bytes_added: usize,
}

/// The CUDA part of a library: its device arena and launches (`codegen/gpu/ptx.rs`).
#[derive(Serialize)]
pub struct Cuda {
    pub sm: String,
    pub ptx_bytes: usize,
    pub device_arena_bytes: u64,
    pub device_weight_bytes: usize,
    pub block_threads: usize,
    pub launches: Vec<Launch>,
}

#[derive(Serialize)]
pub struct Launch {
    pub entry: String,
    pub blocks: u32,
    pub elements: usize,
    /// Argument addresses as offsets into the device arena (output first).
    pub args: Vec<u64>,
}

/// The manifest's CUDA section for a compiled PTX module.
pub fn cuda(ptx: &crate::codegen::gpu::ptx::PtxModule) -> Cuda {
    Cuda {
        sm: ptx.sm.clone(),
        ptx_bytes: ptx.ptx.len(),
        device_arena_bytes: ptx.layout.size,
        device_weight_bytes: ptx.layout.weights.len(),
        block_threads: crate::codegen::gpu::ptx::BLOCK_THREADS,
        launches: ptx
            .launches
            .iter()
            .map(|l| Launch {
                entry: l.entry.clone(),
                blocks: l.blocks(),
                elements: l.elements,
                args: l.args.clone(),
            })
            .collect(),
    }
}

/// Builds the manifest.
pub fn build(
    m: &Module,
    plan: &BufferPlan,
    target: &str,
    kernels: &[KernelInfo],
    before_fusion: usize,
    weights_bytes: usize,
) -> Manifest {
    let c = &m.entry;
    let tensor = |name: &str, s: &crate::ir::Shape, api: Option<crate::ir::DType>| Tensor {
        name: name.to_string(),
        dtype: api.unwrap_or(s.dtype).name().to_string(),
        shape: s.dims.clone(),
        computed_as: api.map(|_| s.dtype.name().to_string()),
    };
    Manifest {
        name: m.name.clone(),
        target: target.to_string(),
        compiler: format!("xla-aot {}", env!("CARGO_PKG_VERSION")),
        inputs: c
            .parameters()
            .iter()
            .enumerate()
            .map(|(k, &p)| tensor(&c.inst(p).name, &c.inst(p).shape, m.api.input(k)))
            .collect(),
        outputs: c
            .outputs
            .iter()
            .enumerate()
            .map(|(k, o)| tensor(&o.name, &c.inst(o.value).shape, m.api.output(k)))
            .collect(),
        arena_size: plan.arena_size,
        arena_align: ARENA_ALIGN,
        arena_lower_bound: plan.lower_bound,
        arena_efficiency: if plan.arena_size == 0 {
            1.0
        } else {
            (plan.lower_bound as f64 / plan.arena_size as f64 * 1000.0).round() / 1000.0
        },
        arena_strategy: plan.strategy.to_string(),
        weights_bytes,
        precision: m.precision.name().to_string(),
        hlo_instructions: c.instructions.len(),
        hlo_instructions_before_fusion: before_fusion,
        kernel_count: kernels.len(),
        activation_traffic: kernels.iter().map(|k| k.reads + k.writes).sum(),
        flops: kernels.iter().map(|k| k.flops).sum(),
        buffers: plan
            .buffers
            .iter()
            .map(|b| Buffer {
                name: b.name.clone(),
                offset: b.offset,
                size: b.size,
                live: b.live,
            })
            .collect(),
        slices: plan
            .slices
            .iter()
            .map(|s| Slice {
                name: s.name.clone(),
                of: s.of.clone(),
                offset: s.offset,
                size: s.size,
            })
            .collect(),
        kernels: kernels
            .iter()
            .map(|k| Kernel {
                name: k.name.clone(),
                ops: k.ops.clone(),
                reads: k.reads,
                weight_reads: k.weight_reads,
                writes: k.writes,
                flops: k.flops,
                text_bytes: None,
                rodata_bytes: None,
            })
            .collect(),
        cuda: None,
        memory: None,
        isa_variants: None,
        weights_blob: None,
    }
}
