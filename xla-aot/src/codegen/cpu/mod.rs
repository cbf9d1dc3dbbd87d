//! CPU code generation: one LLVM module per model, optimised with LLVM's O3 pipeline for the
//! target CPU and emitted as a relocatable object.
//!
//! Contract: [`build_module`] turns a verified module and its buffer plan into a module that
//! exports exactly `<name>_run`, `<name>_run_ptrs` (the C API of docs/codegen.md, `core/entry.rs`),
//! `<name>_set_parallel_for` (the optional thread hook, `parallel.rs`) and `<name>_set_profiler`
//! (the optional kernel profiler, `core/profiler.rs`) and needs no symbol from
//! anywhere: kernels and weights are internal, math is inline (`core/math.rs`), and every
//! function carries `"no-builtins"` so LLVM never turns a loop into a call to `memset`/`memcpy`.
//! Each HLO instruction that computes a value becomes one internal kernel function whose buffer
//! arguments are `noalias` (no value shares bytes with its operands). Elementwise and fused loops
//! run over the output in memory order, so stores are contiguous and LLVM's loop vectorizer widens
//! them. Dots and convolutions run register-blocked micro-kernels with weights packed at compile
//! time (`gemm.rs`, `conv.rs`; the packing is decided by `core/packing.rs`) where their layouts
//! allow, and otherwise loop nests that accumulate into the output with `llvm.fmuladd`,
//! innermost over output columns (`loops.rs`); neither reassociates a sum.
//!
//! The backend is the state type [`Cpu`] of the shared emitter (`Cg` below) and the methods this
//! folder adds to it: kernel choice (`kernel.rs`), micro-kernels and their epilogues (`gemm.rs`,
//! `conv.rs`, `epilogue.rs`, `vector.rs`), reductions (`reduce.rs`), the parallel-for hook
//! (`parallel.rs`), the bucket dispatcher (`batch.rs`), the run-time ISA dispatcher of a
//! multi-ISA library (`isa_dispatch.rs`), the in-process JIT (`jit.rs`) with its
//! thread pool (`pool.rs`) and the
//! FMA peak it measures (`peak.rs`); `stage.rs` copies NHWC input channels-major for `conv.rs`.

pub mod batch;
pub mod byte_storage;
mod byte_store;
mod conv;
mod epilogue;
mod gemm;
mod gemm_bf16;
mod gemm_f16;
mod gemm_i8;
pub(crate) mod gemm_pack;
mod gemm_tiles;
pub mod isa_dispatch;
pub mod jit;
mod kernel;
mod lanes_loop;
mod loops;
pub mod multi_isa;
mod parallel;
pub mod peak;
pub mod pool;
mod quad_dot;
mod reduce;
mod smlad_loop;
mod stage;
pub mod strided_out;
mod vector;
mod winograd;

use crate::arena::BufferPlan;
use crate::codegen::core::concat_runs::ConcatRuns;
use crate::codegen::core::packing::Packings;
pub use crate::codegen::core::profiler::ProfilerSite;
use crate::codegen::core::target::module_for;
use crate::codegen::core::weights::{ExternalWeight, ExternalWeights, Placement};
use crate::codegen::core::{Backend, CodegenError, Emitter, KernelInfo};
use crate::ir::shuffle::ChannelMap;
use crate::ir::{DType, InstId, Module as Hlo, Shape};
use crate::target::Target;
pub use batch::{BatchPlan, Bucket};
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::TargetMachine;
use inkwell::values::{BasicMetadataValueEnum, FunctionValue, IntValue};
use std::cell::{Cell, RefCell};

/// The CPU backend's state: what its kernel choice and micro-kernels need besides the shared
/// emitter.
pub struct Cpu {
    /// How the module's constants are stored (`core/packing.rs`), decided once per module.
    packings: Packings,
    /// Whether the dot or convolution of the kernel being generated reads a packed rhs.
    packed_rhs: Cell<bool>,
    /// The narrow type that packed rhs is stored in, if not f32: F16 or BF16 (its kernel parameter
    /// is an `i16*` and `vector.rs`' `vload` widens what it loads through one) or I8 (int8 GEMM
    /// panels: an `i8*`, `vload` converts and `gemm.rs` applies the columns' scales).
    half_rhs: Cell<Option<DType>>,
    /// Whether that packed rhs holds GEMM panels of bfloat16 pairs for `vdpbf16ps`
    /// (`Packings::reads_bf16_pairs`, `gemm_bf16.rs`).
    bf16_pairs: Cell<bool>,
    /// The kernel's dot reads int8 VNNI quads with this byte offset of its data operand: the
    /// unsigned one of `Packings::reads_vnni` plus the dot product's `quad_dot::byte_shift`
    /// (`a + offset` are the bytes `vpdpbusd`, `vpmaddwd`, `vpmaddubsw`, `sdot` or `smull` reads,
    /// `quad_dot.rs`).
    vnni: Cell<Option<i32>>,
    /// The kernel's int8 product reads integer weights (`Packings::reads_unit_scales`): its i32
    /// sums, converted, are its f32 result with no multiply by the column scales.
    unit_scales: Cell<bool>,
    /// The register epilogue's first step adds a per-channel integer bias that the int8
    /// convolution adds to its i32 sums instead (`kernel.rs` `sum_bias`, `conv/int8.rs`).
    sum_bias: Cell<bool>,
    /// The kernel's rank-1 constant arguments' values (`None` for the others), by argument.
    vector_consts: RefCell<Vec<Option<Vec<f32>>>>,
    /// Those quads hold no −128 and the target multiplies such with `vpmaddubsw` on signs
    /// (`Packings::quads_avoid_min`, `quad_dot.rs` `DotKind::Signs`).
    vnni_signs: Cell<bool>,
    /// The current kernel's Winograd geometry, when its convolution takes that path.
    winograd: Cell<Option<crate::codegen::core::winograd::Geometry>>,
    /// The current kernel's packed-A plan, when its f32 GEMM packs A into the kernel scratch
    /// (`gemm_pack.rs`).
    a_pack: Cell<Option<gemm_pack::APack>>,
    /// The register epilogue of the output fusion being generated (`epilogue.rs`).
    reg_epi: RefCell<Option<epilogue::RegEpilogue>>,
    /// Set by a micro-kernel that applied `reg_epi` to every element it stored.
    epi_applied: Cell<bool>,
    /// The int → f32 conversions known exact (the addresses of their LLVM values): the
    /// register epilogue's integer steps end in one whose bound is within f32's exact integers
    /// (`epilogue.rs`); converting one back to i32 takes its operand (`Cg::exact_int_of`).
    exact_casts: RefCell<std::collections::HashSet<usize>>,
    /// The concatenations the pool of the input fusion being generated reads along its
    /// channels (`core/concat_runs.rs`), for `reduce.rs`'s channels-minor pooling.
    pool_runs: RefCell<Option<ConcatRuns>>,
    /// The channel map the convolution being generated reads its input through
    /// (`ir/shuffle.rs` `conv_input`; input channel `s` is read at `source(s)`), and the shape of
    /// the buffer it reads (whose strides the kernel uses; its channels are the source's).
    in_channels: Cell<Option<ChannelMap>>,
    in_source: RefCell<Option<Shape>>,
    /// The strides of the concatenation the current kernel writes into (`strided_out.rs`).
    out_strides: RefCell<Option<Vec<u64>>>,
    /// The byte type the current kernel stores its result in, and its arguments' (kernel
    /// argument `j`: `None` where stored as computed), from the plan (`byte_storage.rs`).
    out_stored: Cell<Option<DType>>,
    args_stored: RefCell<Vec<Option<DType>>>,
    /// The bias of those bytes (`Range::biased_byte`: a value `x` is the byte `x + bias`; 0 but
    /// for the values byte_storage.rs lets convolutions write and read biased).
    out_bias: Cell<i32>,
    args_bias: RefCell<Vec<i32>>,
    /// The model whose parallel-for registration the kernels use (a batch variant: the declared
    /// batch's module).
    hook_owner: String,
    /// Where the constants go (`core::weights`): the data object or the caller's blob in a
    /// library built ahead of time.
    placement: Placement,
    /// The weights declared external, in order.
    external: Vec<ExternalWeight>,
}

impl Cpu {
    fn new(hlo: &Hlo, hook_owner: &str) -> Cpu {
        Cpu {
            packings: Packings::none(hlo),
            packed_rhs: Cell::new(false),
            half_rhs: Cell::new(None),
            bf16_pairs: Cell::new(false),
            vnni: Cell::new(None),
            unit_scales: Cell::new(false),
            sum_bias: Cell::new(false),
            vector_consts: RefCell::new(Vec::new()),
            vnni_signs: Cell::new(false),
            winograd: Cell::new(None),
            a_pack: Cell::new(None),
            reg_epi: RefCell::new(None),
            epi_applied: Cell::new(false),
            exact_casts: RefCell::new(std::collections::HashSet::new()),
            pool_runs: RefCell::new(None),
            in_channels: Cell::new(None),
            in_source: RefCell::new(None),
            out_strides: RefCell::new(None),
            out_stored: Cell::new(None),
            args_stored: RefCell::new(Vec::new()),
            out_bias: Cell::new(0),
            args_bias: RefCell::new(Vec::new()),
            hook_owner: hook_owner.to_string(),
            placement: Placement::InModule,
            external: Vec::new(),
        }
    }
}

/// The emitter of a CPU module.
pub(crate) type Cg<'a, 'ctx> = Emitter<'a, 'ctx, Cpu>;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The packed-A plan of the kernel of entry instruction `id` (`gemm_pack.rs`), when the
    /// buffer plan reserved enough kernel scratch for it.
    fn a_pack_of(&self, id: InstId) -> Option<gemm_pack::APack> {
        let reserved = self.plan.scratch.map_or(0, |(_, bytes)| bytes);
        gemm_pack::of(self.hlo, self.target, &self.be.packings, id)
            .filter(|p| p.bytes() <= reserved)
    }
}

impl<'ctx> Backend<'ctx> for Cpu {
    /// A CPU kernel computes its whole output, in memory order.
    fn elements<'a>(
        cg: &Cg<'a, 'ctx>,
        shape: &Shape,
        body: &mut dyn FnMut(&Cg<'a, 'ctx>, &[IntValue<'ctx>]),
    ) {
        cg.loop_nest_memory_order(shape, body)
    }

    fn kernel<'a>(
        cg: &Cg<'a, 'ctx>,
        name: &str,
        id: InstId,
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        cg.kernel(name, id)
    }

    fn takes_scratch<'a>(cg: &Cg<'a, 'ctx>, id: InstId) -> bool {
        cg.be.packings.winograd(cg.hlo, id).is_some() || cg.a_pack_of(id).is_some()
    }

    fn copy_kernel<'a>(cg: &Cg<'a, 'ctx>, name: &str, d: DType, n: usize) -> FunctionValue<'ctx> {
        cg.copy_kernel(name, d, n)
    }

    /// One call per kernel.
    fn invoke<'a>(
        cg: &Cg<'a, 'ctx>,
        f: FunctionValue<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
        _invocations: usize,
    ) {
        cg.b.build_call(f, args, "").unwrap();
    }
}

/// Generates the (unoptimised, verified) LLVM module of `hlo` for `target`.
pub fn build_module<'ctx>(
    ctx: &'ctx Context,
    tm: &TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
) -> Result<(Module<'ctx>, Vec<KernelInfo>), CodegenError> {
    let (module, kernels, ..) =
        build_library_module(ctx, tm, hlo, plan, target, Placement::InModule)?;
    Ok((module, kernels))
}

/// [`build_module`] with the constants placed by `placement`: with [`Placement::DataObject`] the
/// large weights are declared external (`core::weights`) and returned (if any), for the
/// library's data object to define; with [`Placement::Blob`] the blob is returned
/// (`core::weights_blob`).
#[allow(clippy::type_complexity)]
pub fn build_library_module<'ctx>(
    ctx: &'ctx Context,
    tm: &TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    placement: Placement,
) -> Result<
    (
        Module<'ctx>,
        Vec<KernelInfo>,
        Option<ExternalWeights>,
        Option<Vec<u8>>,
    ),
    CodegenError,
> {
    let module = module_for(ctx, tm, &hlo.name);
    let mut be = Cpu::new(hlo, &hlo.name);
    be.placement = placement;
    let mut cg = Cg::new(ctx, &module, hlo, plan, target, be);
    let site = ProfilerSite {
        owner: &hlo.name,
        first: 0,
    };
    let kernels = cg.build(true, site)?;
    let weights = std::mem::take(&mut cg.be.external);
    let external = (!weights.is_empty()).then(|| ExternalWeights {
        packings: cg.be.packings.clone(),
        weights,
    });
    let blob = cg.blob.take().map(|l| l.bytes);
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    Ok((module, kernels, external, blob))
}

/// Adds batch variant `v` (a module named `<name>_b<B>`, planned by `plan`) to `module`: its
/// kernels and entry points, sharing the parallel-for and profiler registrations of model
/// `site.owner`; its first kernel is the manifest's kernel `site.first`.
pub fn add_variant<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    v: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    site: ProfilerSite<'_>,
) -> Result<Vec<KernelInfo>, CodegenError> {
    let mut cg = Cg::new(ctx, module, v, plan, target, Cpu::new(v, site.owner));
    cg.build(false, site)
}

/// Adds `hlo`'s `<name>_<entry>` bucket dispatcher (`batch.rs`) to `module`.
pub fn add_batch_dispatcher<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    bp: &BatchPlan,
) {
    let cg = Cg::new(ctx, module, hlo, plan, target, Cpu::new(hlo, &hlo.name));
    cg.batch_dispatcher(bp);
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The module's constants, kernels and entry points. `own_setter`: export
    /// `<name>_set_parallel_for` and `<name>_set_profiler` (a batch variant has neither: it
    /// shares its model's registrations); `site`: where the run reports its kernels.
    fn build(
        &mut self,
        own_setter: bool,
        site: ProfilerSite<'_>,
    ) -> Result<Vec<KernelInfo>, CodegenError> {
        self.check_module()?;
        self.be.packings = Packings::for_cpu(self.hlo, self.target, self.plan.winograd_scratch());
        let (globals, external) = self.constant_globals(&self.be.packings, &self.be.placement)?;
        self.be.external = external;
        let (kernels, calls) = self.kernels()?;
        self.entry_points(&globals, &calls, site);
        if own_setter {
            self.parallel_setter();
            self.profiler_setter();
        }
        if let Some(l) = &*self.blob.borrow() {
            self.weights_checker(l);
        }
        Ok(kernels)
    }
}
