//! CPU code generation: one LLVM module per model, optimised with LLVM's O3 pipeline for the
//! target CPU and emitted as a relocatable object.
//!
//! Contract: [`compile`] turns a verified module and its buffer plan into an object that exports
//! exactly `<name>_run`, `<name>_run_ptrs` (the C API of DESIGN.md) and `<name>_set_parallel_for`
//! (the optional thread hook, `cpu/parallel.rs`) and needs no symbol from anywhere: kernels and
//! weights are internal, math is inline (`math.rs`), and every function carries `"no-builtins"`
//! so LLVM never turns a loop into a call to `memset`/`memcpy`.
//! Each HLO instruction that computes a value becomes one internal kernel function whose buffer
//! arguments are `noalias` (no value shares bytes with its operands). Elementwise and fused loops
//! run over the output in memory order, so stores are contiguous and LLVM's loop vectorizer widens
//! them. Dots and convolutions run register-blocked micro-kernels with weights packed at compile
//! time (`cpu/gemm.rs`, `cpu/conv.rs`) where their layouts allow, and otherwise loop nests that
//! accumulate into the output with `llvm.fmuladd`, innermost over output columns; neither
//! reassociates a sum.

pub mod batch;
mod conv;
mod epilogue;
mod gemm;
mod grid;
mod parallel;
mod reduce;
mod sample;
mod tiled;

use super::math::{self, MathFn};
use crate::arena::{ARENA_ALIGN, BufferPlan, Loc, root};
use crate::ir::{
    BinaryOp, CompareDir, Computation, DType, FusionKind, InstId, Instruction, Module as Hlo, Op,
    ReduceKind, Shape, UnaryOp,
};
use crate::target::Target;
pub use batch::{BatchPlan, Bucket};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine,
    TargetTriple,
};
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum};
use inkwell::values::{
    AnyValue, BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue,
};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate, OptimizationLevel};
use runtime_min::Status;
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
    /// Something in the module the CPU backend does not implement.
    #[error("the CPU backend cannot compile %{inst}: {reason}")]
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
}

/// Memory traffic of a kernel over `operands` writing `out` bytes: (activations, weights).
fn traffic(c: &Computation, operands: &[InstId]) -> (usize, usize) {
    let mut seen = Vec::new();
    let (mut act, mut weights) = (0, 0);
    for &o in operands {
        if seen.contains(&o) {
            continue;
        }
        seen.push(o);
        let bytes = c.inst(o).shape.size_bytes();
        match c.inst(o).op {
            Op::Constant(_) => weights += bytes,
            _ => act += bytes,
        }
    }
    (act, weights)
}

/// The result of CPU code generation.
#[derive(Debug, Clone)]
pub struct CpuObject {
    /// Relocatable object file bytes.
    pub object: Vec<u8>,
    /// Kernels in execution order.
    pub kernels: Vec<KernelInfo>,
    /// Exported symbols.
    pub exports: Vec<String>,
    /// Target assembly, when asked for.
    pub assembly: Option<String>,
    /// LLVM IR before and after optimisation, when asked for.
    pub ir: Option<(String, String)>,
    /// Each kernel's LLVM IR before and after optimisation, when asked for: (kernel, before, after).
    pub kernel_ir: Vec<(String, String, String)>,
}

/// What to produce besides the object.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Also produce target assembly.
    pub assembly: bool,
    /// Also keep the LLVM IR text before and after optimisation.
    pub ir: bool,
    /// Kernels in the per-element (grid) form of the GPU backend, each run over its whole grid by
    /// the entry points: the host emulation of the PTX kernels (`codegen/ptx.rs`).
    pub grid: bool,
}

pub(crate) fn init_llvm() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cfg = InitializationConfig::default();
        LlvmTarget::initialize_x86(&cfg);
        LlvmTarget::initialize_aarch64(&cfg);
        LlvmTarget::initialize_nvptx(&cfg);
    });
}

/// The CPU and features of `t` on function `f` (not only on the target machine), so that any code
/// generator of its module (the in-process JIT included) selects the same instructions.
pub(crate) fn target_attrs(ctx: &Context, f: FunctionValue<'_>, t: &Target) {
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute("target-cpu", &t.cpu),
    );
    if !t.features.is_empty() {
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("target-features", &t.features),
        );
    }
}

/// Creates the LLVM target machine for `t`.
pub fn target_machine(t: &Target) -> Result<TargetMachine, CodegenError> {
    init_llvm();
    let triple = TargetTriple::create(&t.triple);
    let err = |reason: String| CodegenError::Target {
        triple: t.triple.clone(),
        cpu: t.cpu.clone(),
        reason,
    };
    let target = LlvmTarget::from_triple(&triple).map_err(|e| err(e.to_string()))?;
    target
        .create_target_machine(
            &triple,
            &t.cpu,
            &t.features,
            OptimizationLevel::Aggressive,
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| err("no target machine".into()))
}

/// Compiles `hlo` with buffer plan `plan` for `target`.
pub fn compile(
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    opts: Options,
) -> Result<CpuObject, CodegenError> {
    compile_batched(hlo, plan, &[], None, target, opts)
}

/// [`compile`], with batch buckets: `variants` (the other buckets' modules, named
/// `<name>_b<B>`, and plans) go into the same object, sharing identical weights (one private
/// constant each after LLVM's constant merging) and `hlo`'s parallel-for registration; `batch`
/// adds the `<name>_run_batch` dispatcher (`cpu/batch.rs`).
pub fn compile_batched(
    hlo: &Hlo,
    plan: &BufferPlan,
    variants: &[(&Hlo, &BufferPlan)],
    batch: Option<&BatchPlan>,
    target: &Target,
    opts: Options,
) -> Result<CpuObject, CodegenError> {
    let tm = target_machine(target)?;
    let ctx = Context::create();
    let (module, mut kernels) = build_module(&ctx, &tm, hlo, plan, target, opts.grid)?;
    let mut exports = vec![
        format!("{}_run", hlo.name),
        format!("{}_run_ptrs", hlo.name),
        format!("{}_set_parallel_for", hlo.name),
    ];
    for (v, vplan) in variants {
        let mut cg = Cg::new(&ctx, &module, v, vplan, target);
        cg.grid = opts.grid;
        cg.hook_base = Some(hlo.name.clone());
        cg.variant = true;
        kernels.extend(cg.build()?);
        exports.push(format!("{}_run", v.name));
        exports.push(format!("{}_run_ptrs", v.name));
    }
    if let Some(bp) = batch {
        let cg = Cg::new(&ctx, &module, hlo, plan, target);
        cg.batch_dispatcher(bp);
        exports.push(format!("{}_{}", hlo.name, bp.entry));
        exports.push(format!("{}_{}_ptrs", hlo.name, bp.entry));
        module
            .verify()
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    }
    let before = opts.ir.then(|| module.print_to_string().to_string());
    let kernel_text = |m: &Module| -> Vec<String> {
        kernels
            .iter()
            .map(|k| {
                m.get_function(&k.name)
                    .map(|f| f.print_to_string().to_string())
                    .unwrap_or_default()
            })
            .collect()
    };
    let kernels_before = if opts.ir {
        kernel_text(&module)
    } else {
        Vec::new()
    };
    optimize(&module, &tm)?;
    let after = opts.ir.then(|| module.print_to_string().to_string());
    let kernel_ir = if opts.ir {
        kernels
            .iter()
            .zip(kernels_before)
            .zip(kernel_text(&module))
            .map(|((k, b), a)| (k.name.clone(), b, a))
            .collect()
    } else {
        Vec::new()
    };
    let object = tm
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?
        .as_slice()
        .to_vec();
    let assembly = if opts.assembly {
        let buf = tm
            .write_to_memory_buffer(&module, FileType::Assembly)
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        Some(String::from_utf8_lossy(buf.as_slice()).into_owned())
    } else {
        None
    };
    Ok(CpuObject {
        object,
        kernels,
        exports,
        assembly,
        ir: before.zip(after),
        kernel_ir,
    })
}

/// Generates the (unoptimised, verified) LLVM module of `hlo` for `target`.
pub fn build_module<'ctx>(
    ctx: &'ctx Context,
    tm: &TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    grid: bool,
) -> Result<(Module<'ctx>, Vec<KernelInfo>), CodegenError> {
    let module = ctx.create_module(&hlo.name);
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let mut cg = Cg::new(ctx, &module, hlo, plan, target);
    cg.grid = grid;
    let kernels = cg.build()?;
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    Ok((module, kernels))
}

/// Generates the PTX-mode module of `hlo` (`ptx.rs`): grid kernels with `.entry` wrappers, no
/// host entry points, no weight globals. Returns the kernels and the entries (name, elements).
#[allow(clippy::type_complexity)]
pub fn build_ptx_module<'ctx>(
    ctx: &'ctx Context,
    tm: &TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
) -> Result<(Module<'ctx>, Vec<KernelInfo>, Vec<GridLaunch>), CodegenError> {
    let module = ctx.create_module(&hlo.name);
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let mut cg = Cg::new(ctx, &module, hlo, plan, target);
    cg.grid = true;
    cg.ptx = true;
    let kernels = cg.build()?;
    let entries = cg.ptx_entries.take();
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    Ok((module, kernels, entries))
}

/// Runs LLVM's O3 pipeline for the target machine.
pub fn optimize(module: &Module, tm: &TargetMachine) -> Result<(), CodegenError> {
    let popts = PassBuilderOptions::create();
    popts.set_loop_vectorization(true);
    popts.set_loop_slp_vectorization(true);
    popts.set_loop_unrolling(false);
    module
        .run_passes("default<O3>", tm, popts)
        .map_err(|e| CodegenError::Llvm(e.to_string()))
}

/// Code generation state for one module.
struct Cg<'a, 'ctx> {
    ctx: &'ctx Context,
    m: &'a Module<'ctx>,
    b: Builder<'ctx>,
    hlo: &'a Hlo,
    plan: &'a BufferPlan,
    target: &'a Target,
    fmuladd: FunctionValue<'ctx>,
    sqrt: FunctionValue<'ctx>,
    fabs: FunctionValue<'ctx>,
    /// Entry constants stored as packed GEMM panels (`gemm.rs`), by instruction.
    packed: Vec<bool>,
    /// Whether the dot of the kernel being generated reads a packed rhs.
    packed_rhs: std::cell::Cell<bool>,
    /// The register epilogue of the output fusion being generated (`cpu/epilogue.rs`).
    reg_epi: std::cell::RefCell<Option<epilogue::RegEpilogue>>,
    /// Set by a micro-kernel that applied `reg_epi` to every element it stored.
    epi_applied: std::cell::Cell<bool>,
    /// Per-element (grid) kernels: each kernel function takes a trailing `i64` element index and
    /// computes that one output element (the GPU form; `ptx.rs`).
    grid: bool,
    /// The element index parameter of the grid kernel being generated.
    gid: std::cell::Cell<Option<IntValue<'ctx>>>,
    /// PTX mode (implies `grid`): no host entry points and no weight globals; every kernel gets a
    /// `.entry` wrapper computing its element index from the thread grid (`ptx.rs`).
    ptx: bool,
    /// The PTX entries generated, in launch order.
    ptx_entries: std::cell::RefCell<Vec<GridLaunch>>,
    /// Per operand of the kernel being generated: its value when it is a scalar f32 constant
    /// (register epilogues use the number instead of loading it).
    scalar_consts: std::cell::RefCell<Vec<Option<f32>>>,
    /// Set by a kernel whose grid is not one invocation per output element (a tiled product:
    /// `cpu/tiled.rs`): its invocations.
    grid_size: std::cell::Cell<Option<usize>>,
    /// The model whose parallel-for registration this module uses (batch variants: the
    /// declared batch's module); `None`: its own.
    hook_base: Option<String>,
    /// A batch variant: no `<name>_set_parallel_for` of its own.
    variant: bool,
}

/// One launch of a PTX-mode module (`ptx.rs` turns these into device-arena offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridLaunch {
    /// The `.entry` name.
    pub entry: String,
    /// Output elements: one thread each.
    pub elements: usize,
    /// Where the kernel writes (an output or an arena slice).
    pub out: Loc,
    /// The values its operands read, aliases followed to the value owning the bytes.
    pub operands: Vec<InstId>,
}

/// Running values of a reduction along a contiguous dim: FMA/add latency (4 cycles) times the
/// two pipes of current x86-64 and Arm cores. A power of two (combined by a balanced tree).
const REDUCE_PARTIALS: usize = 8;

/// How a weight is stored when a dot or convolution reads it packed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Packing {
    /// GEMM panels (`gemm::pack`) for a dot with these dims.
    Gemm(crate::ir::DotDims),
    /// Tap-major convolution panels (`conv::pack`).
    Conv,
}

/// An element position: a multi-index, or a row-major offset (what a reshape passes on).
#[derive(Clone, Copy)]
enum Ix<'a, 'ctx> {
    Multi(&'a [IntValue<'ctx>]),
    Linear(IntValue<'ctx>),
}

/// A kernel being generated: its function and the pointer of each buffer it touches.
struct Kernel<'ctx> {
    f: FunctionValue<'ctx>,
    out: PointerValue<'ctx>,
    args: Vec<PointerValue<'ctx>>,
    /// Whether each buffer (the output first, then the arguments) is `noalias`.
    noalias: Vec<bool>,
}

/// Element strides of each logical dim of `s` in memory, from its layout (minor to major).
pub fn physical_strides(s: &Shape) -> Vec<u64> {
    let mut strides = vec![1u64; s.rank()];
    let mut acc = 1u64;
    for &d in &s.layout.minor_to_major {
        strides[d] = acc;
        acc *= s.dims[d] as u64;
    }
    strides
}

fn is_row_major(s: &Shape) -> bool {
    s.layout == crate::ir::Layout::row_major(s.rank())
}

fn row_major_strides(dims: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as u64;
    }
    s
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    fn new(
        ctx: &'ctx Context,
        m: &'a Module<'ctx>,
        hlo: &'a Hlo,
        plan: &'a BufferPlan,
        target: &'a Target,
    ) -> Self {
        Cg {
            ctx,
            m,
            b: ctx.create_builder(),
            hlo,
            plan,
            target,
            fmuladd: math::fmuladd(ctx, m),
            sqrt: math::sqrt(ctx, m),
            fabs: math::fabs(ctx, m),
            packed: vec![false; hlo.entry.instructions.len()],
            packed_rhs: std::cell::Cell::new(false),
            reg_epi: std::cell::RefCell::new(None),
            epi_applied: std::cell::Cell::new(false),
            grid: false,
            gid: std::cell::Cell::new(None),
            ptx: false,
            ptx_entries: std::cell::RefCell::new(Vec::new()),
            scalar_consts: std::cell::RefCell::new(Vec::new()),
            grid_size: std::cell::Cell::new(None),
            hook_base: None,
            variant: false,
        }
    }

    // ---- types and constants -------------------------------------------------------------------

    fn i64(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v, false)
    }

    fn f32c(&self, v: f64) -> FloatValue<'ctx> {
        self.ctx.f32_type().const_float(v)
    }

    fn elem_type(&self, d: DType) -> BasicTypeEnum<'ctx> {
        match d {
            DType::F32 => self.ctx.f32_type().into(),
            DType::I32 => self.ctx.i32_type().into(),
            _ => self.ctx.i8_type().into(), // pred (and reserved dtypes, rejected earlier)
        }
    }

    fn ptr_type(&self, d: DType) -> inkwell::types::PointerType<'ctx> {
        match self.elem_type(d) {
            BasicTypeEnum::FloatType(t) => t.ptr_type(AddressSpace::default()),
            BasicTypeEnum::IntType(t) => t.ptr_type(AddressSpace::default()),
            _ => unreachable!("element types are scalars"),
        }
    }

    fn i8p(&self) -> inkwell::types::PointerType<'ctx> {
        self.ctx.i8_type().ptr_type(AddressSpace::default())
    }

    fn attr(&self, name: &str) -> Attribute {
        self.ctx
            .create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0)
    }

    /// Attributes every generated function carries.
    /// Whether `p` is not aligned to `ARENA_ALIGN` (the C API's arena check).
    fn is_misaligned(&self, p: PointerValue<'ctx>) -> IntValue<'ctx> {
        let addr = self.b.build_ptr_to_int(p, self.ctx.i64_type(), "").unwrap();
        let low = self
            .b
            .build_and(addr, self.i64(ARENA_ALIGN as u64 - 1), "")
            .unwrap();
        self.b
            .build_int_compare(IntPredicate::NE, low, self.i64(0), "")
            .unwrap()
    }

    fn common_attrs(&self, f: FunctionValue<'ctx>) {
        f.add_attribute(AttributeLoc::Function, self.attr("nounwind"));
        f.add_attribute(
            AttributeLoc::Function,
            self.ctx.create_string_attribute("no-builtins", ""),
        );
        target_attrs(self.ctx, f, self.target);
        if self.target.vector_bits > 256 {
            let w = self.target.vector_bits.to_string();
            f.add_attribute(
                AttributeLoc::Function,
                self.ctx.create_string_attribute("prefer-vector-width", &w),
            );
            f.add_attribute(
                AttributeLoc::Function,
                self.ctx
                    .create_string_attribute("min-legal-vector-width", &w),
            );
        }
    }

    // ---- memory -----------------------------------------------------------------------------------

    fn gep(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>) -> PointerValue<'ctx> {
        unsafe { self.b.build_in_bounds_gep(p, &[off], "").unwrap() }
    }

    /// Loads element `off` of a buffer of dtype `d`; pred loads give i1.
    fn load(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>, d: DType) -> BasicValueEnum<'ctx> {
        let v = self.b.build_load(self.gep(p, off), "").unwrap();
        if d == DType::Pred {
            let i8v = v.into_int_value();
            self.b
                .build_int_compare(IntPredicate::NE, i8v, self.ctx.i8_type().const_zero(), "")
                .unwrap()
                .into()
        } else {
            v
        }
    }

    fn store(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>, v: BasicValueEnum<'ctx>, d: DType) {
        let v: BasicValueEnum = if d == DType::Pred {
            self.b
                .build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "")
                .unwrap()
                .into()
        } else {
            v
        };
        self.b.build_store(self.gep(p, off), v).unwrap();
    }

    /// Σ idx[d]·strides[d], the offset of an index in a buffer with those element strides.
    fn strided(&self, idx: &[IntValue<'ctx>], strides: &[u64]) -> IntValue<'ctx> {
        let mut acc = self.i64(0);
        for (i, &st) in idx.iter().zip(strides) {
            let t = if st == 1 {
                *i
            } else {
                self.b.build_int_mul(*i, self.i64(st), "").unwrap()
            };
            acc = self.b.build_int_add(acc, t, "").unwrap();
        }
        acc
    }

    /// Physical offset of logical index `idx` in a buffer of shape `s` (its layout's strides).
    fn offset(&self, idx: &[IntValue<'ctx>], s: &Shape) -> IntValue<'ctx> {
        self.strided(idx, &physical_strides(s))
    }

    /// Logical row-major offset of `idx` in `dims` (what a reshape preserves).
    fn linear(&self, idx: &[IntValue<'ctx>], dims: &[usize]) -> IntValue<'ctx> {
        self.strided(idx, &row_major_strides(dims))
    }

    // ---- loops --------------------------------------------------------------------------------------

    /// `for i in 0..n { body(i) }`, leaving the builder after the loop.
    fn for_loop(&self, n: usize, body: &mut dyn FnMut(&Self, IntValue<'ctx>)) {
        self.for_range(self.i64(0), self.i64(n as u64), body);
    }

    /// `for i in lo..hi { body(i) }` with bounds known only at run time (possibly empty).
    fn for_range(
        &self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        body: &mut dyn FnMut(&Self, IntValue<'ctx>),
    ) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let head = self.ctx.append_basic_block(f, "range");
        let exit = self.ctx.append_basic_block(f, "range.end");
        let pre = self.b.get_insert_block().unwrap();
        let any = self
            .b
            .build_int_compare(IntPredicate::SLT, lo, hi, "")
            .unwrap();
        self.b.build_conditional_branch(any, head, exit).unwrap();
        self.b.position_at_end(head);
        let phi = self.b.build_phi(self.ctx.i64_type(), "i").unwrap();
        let i = phi.as_basic_value().into_int_value();
        body(self, i);
        let latch = self.b.get_insert_block().unwrap();
        let next = self.b.build_int_add(i, self.i64(1), "").unwrap();
        phi.add_incoming(&[(&lo, pre), (&next, latch)]);
        let more = self
            .b
            .build_int_compare(IntPredicate::SLT, next, hi, "")
            .unwrap();
        self.b.build_conditional_branch(more, head, exit).unwrap();
        self.b.position_at_end(exit);
    }

    /// The output positions `[lo, hi)` along one windowed dimension whose input position
    /// `o·stride + tap·dilation - pad` falls inside `[0, extent)`, for a tap known at run time.
    fn window_range(
        &self,
        tap: IntValue<'ctx>,
        stride: usize,
        dilation: usize,
        pad: usize,
        extent: usize,
        out: usize,
    ) -> (IntValue<'ctx>, IntValue<'ctx>) {
        let b = &self.b;
        let td = b.build_int_mul(tap, self.i64(dilation as u64), "").unwrap();
        // lo = ceil((pad - td) / stride), at least 0.
        let a = b.build_int_sub(self.i64(pad as u64), td, "").unwrap();
        let a_pos = b
            .build_int_compare(IntPredicate::SGT, a, self.i64(0), "")
            .unwrap();
        let up = b.build_int_add(a, self.i64(stride as u64 - 1), "").unwrap();
        let lo_pos = b
            .build_int_signed_div(up, self.i64(stride as u64), "")
            .unwrap();
        let lo = self
            .select(a_pos, lo_pos.into(), self.i64(0).into())
            .into_int_value();
        // hi = floor((extent - 1 + pad - td) / stride) + 1, at most `out`; empty when negative.
        let bb = b
            .build_int_sub(self.i64((extent - 1 + pad) as u64), td, "")
            .unwrap();
        let b_neg = b
            .build_int_compare(IntPredicate::SLT, bb, self.i64(0), "")
            .unwrap();
        let hi = b
            .build_int_add(
                b.build_int_signed_div(bb, self.i64(stride as u64), "")
                    .unwrap(),
                self.i64(1),
                "",
            )
            .unwrap();
        let hi = self
            .select(b_neg, self.i64(0).into(), hi.into())
            .into_int_value();
        let over = b
            .build_int_compare(IntPredicate::SGT, hi, self.i64(out as u64), "")
            .unwrap();
        let hi = self
            .select(over, self.i64(out as u64).into(), hi.into())
            .into_int_value();
        (lo, hi)
    }

    /// Nested loops over `dims` (outermost first); `body` gets the index vector.
    fn loop_nest(&self, dims: &[usize], body: &mut dyn FnMut(&Self, &[IntValue<'ctx>])) {
        fn rec<'a, 'ctx>(
            cg: &Cg<'a, 'ctx>,
            dims: &[usize],
            idx: &mut Vec<IntValue<'ctx>>,
            body: &mut dyn FnMut(&Cg<'a, 'ctx>, &[IntValue<'ctx>]),
        ) {
            if idx.len() == dims.len() {
                body(cg, idx);
                return;
            }
            let n = dims[idx.len()];
            cg.for_loop(n, &mut |cg, i| {
                idx.push(i);
                rec(cg, dims, idx, body);
                idx.pop();
            });
        }
        rec(self, dims, &mut Vec::new(), body);
    }

    /// Loops over every element of `shape` in memory order (major dimension outermost, so the
    /// innermost loop walks the buffer contiguously); `body` gets the logical index.
    fn loop_nest_physical(&self, shape: &Shape, body: &mut dyn FnMut(&Self, &[IntValue<'ctx>])) {
        let order: Vec<usize> = shape.layout.minor_to_major.iter().rev().copied().collect();
        if let Some(gid) = self.gid.get() {
            // Grid form: this invocation's element only (elements in memory order).
            let inside = self
                .b
                .build_int_compare(
                    IntPredicate::ULT,
                    gid,
                    self.i64(shape.element_count() as u64),
                    "",
                )
                .unwrap();
            let phys_dims: Vec<usize> = order.iter().map(|&d| shape.dims[d]).collect();
            self.if_then(inside, &mut |cg| {
                let phys = cg.unravel(gid, &phys_dims);
                let mut idx = phys.clone();
                for (k, &d) in order.iter().enumerate() {
                    idx[d] = phys[k];
                }
                body(cg, &idx);
            });
            return;
        }
        let dims: Vec<usize> = order.iter().map(|&d| shape.dims[d]).collect();
        self.loop_nest(&dims, &mut |cg, phys| {
            let mut idx = phys.to_vec();
            for (k, &d) in order.iter().enumerate() {
                idx[d] = phys[k];
            }
            body(cg, &idx);
        });
    }

    /// `if cond { body }`, leaving the builder after it.
    fn if_then(&self, cond: IntValue<'ctx>, body: &mut dyn FnMut(&Self)) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let then = self.ctx.append_basic_block(f, "then");
        let done = self.ctx.append_basic_block(f, "endif");
        self.b.build_conditional_branch(cond, then, done).unwrap();
        self.b.position_at_end(then);
        body(self);
        self.b.build_unconditional_branch(done).unwrap();
        self.b.position_at_end(done);
    }

    /// The `.entry` wrapper of grid kernel `f(out, args..., index)`: the index is
    /// `ctaid.x · ntid.x + tid.x`; marked a kernel in `nvvm.annotations`. Returns its name.
    fn ptx_entry(&self, f: FunctionValue<'ctx>) -> String {
        let n = f.count_params() as usize - 1;
        let params: Vec<BasicMetadataTypeEnum> = (0..n as u32)
            .map(|i| f.get_nth_param(i).unwrap().get_type().into())
            .collect();
        let name = format!("{}_entry", f.get_name().to_str().unwrap_or("kernel"));
        let e = self.m.add_function(
            &name,
            self.ctx.void_type().fn_type(&params, false),
            Some(Linkage::External),
        );
        self.common_attrs(e);
        self.b
            .position_at_end(self.ctx.append_basic_block(e, "entry"));
        let i32t = self.ctx.i32_type();
        let sreg = |reg: &str| {
            let name = format!("llvm.nvvm.read.ptx.sreg.{reg}");
            let fv = self
                .m
                .get_function(&name)
                .unwrap_or_else(|| self.m.add_function(&name, i32t.fn_type(&[], false), None));
            let v = self.call(fv, &[]).into_int_value();
            self.b
                .build_int_z_extend(v, self.ctx.i64_type(), "")
                .unwrap()
        };
        let (ctaid, ntid, tid) = (sreg("ctaid.x"), sreg("ntid.x"), sreg("tid.x"));
        let block = self.b.build_int_mul(ctaid, ntid, "").unwrap();
        let gid = self.b.build_int_add(block, tid, "").unwrap();
        let mut args: Vec<inkwell::values::BasicMetadataValueEnum> = (0..n as u32)
            .map(|i| e.get_nth_param(i).unwrap().into())
            .collect();
        args.push(gid.into());
        self.b.build_call(f, &args, "").unwrap();
        self.b.build_return(None).unwrap();
        let md = self.ctx.metadata_node(&[
            e.as_global_value().as_pointer_value().into(),
            self.ctx.metadata_string("kernel").into(),
            i32t.const_int(1, false).into(),
        ]);
        self.m
            .add_global_metadata("nvvm.annotations", &md)
            .expect("nvvm.annotations");
        name
    }

    /// `if cond { then } else { otherwise }`.
    fn if_else(
        &self,
        cond: IntValue<'ctx>,
        then: &mut dyn FnMut(&Self),
        otherwise: &mut dyn FnMut(&Self),
    ) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let t = self.ctx.append_basic_block(f, "then");
        let e = self.ctx.append_basic_block(f, "else");
        let done = self.ctx.append_basic_block(f, "endif");
        self.b.build_conditional_branch(cond, t, e).unwrap();
        self.b.position_at_end(t);
        then(self);
        self.b.build_unconditional_branch(done).unwrap();
        self.b.position_at_end(e);
        otherwise(self);
        self.b.build_unconditional_branch(done).unwrap();
        self.b.position_at_end(done);
    }

    /// A stack slot in the entry block (promoted to registers by mem2reg).
    fn slot(&self, f: FunctionValue<'ctx>, ty: BasicTypeEnum<'ctx>) -> PointerValue<'ctx> {
        let entry = f.get_first_basic_block().unwrap();
        let tmp = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => tmp.position_before(&i),
            None => tmp.position_at_end(entry),
        }
        tmp.build_alloca(ty, "acc").unwrap()
    }

    // ---- scalar helpers -----------------------------------------------------------------------------

    fn fcmp(&self, p: FloatPredicate, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> IntValue<'ctx> {
        self.b.build_float_compare(p, a, b, "").unwrap()
    }

    fn select(
        &self,
        c: IntValue<'ctx>,
        a: BasicValueEnum<'ctx>,
        b: BasicValueEnum<'ctx>,
    ) -> BasicValueEnum<'ctx> {
        self.b.build_select(c, a, b, "").unwrap()
    }

    /// `convert` of one element (registers: pred is i1, i32, f32), with the interpreter's rules:
    /// f32 → i32 truncates and saturates, NaN gives 0; anything → pred is `x != 0`.
    fn convert(&self, x: BasicValueEnum<'ctx>, from: DType, to: DType) -> BasicValueEnum<'ctx> {
        let b = &self.b;
        let i32t = self.ctx.i32_type();
        let f32t = self.ctx.f32_type();
        match (from, to) {
            _ if from == to => x,
            (DType::F32, DType::I32) => {
                let x = x.into_float_value();
                // 2^31 is exact in f32; every f32 below it (and at least -2^31) converts exactly.
                let limit = 2147483648.0f64;
                let t = b.build_float_to_signed_int(x, i32t, "").unwrap();
                let hi = self.fcmp(FloatPredicate::OGE, x, f32t.const_float(limit));
                let lo = self.fcmp(FloatPredicate::OLT, x, f32t.const_float(-limit));
                let nan = self.fcmp(FloatPredicate::UNO, x, x);
                let t = self.select(hi, i32t.const_int(i32::MAX as u64, false).into(), t.into());
                let t = self.select(lo, i32t.const_int(i32::MIN as u64, true).into(), t);
                self.select(nan, i32t.const_zero().into(), t)
            }
            (DType::I32, DType::F32) => b
                .build_signed_int_to_float(x.into_int_value(), f32t, "")
                .unwrap()
                .into(),
            (DType::Pred, DType::F32) => b
                .build_unsigned_int_to_float(x.into_int_value(), f32t, "")
                .unwrap()
                .into(),
            (DType::Pred, _) => b
                .build_int_z_extend(x.into_int_value(), i32t, "")
                .unwrap()
                .into(),
            (DType::F32, _) => self
                .fcmp(FloatPredicate::UNE, x.into_float_value(), f32t.const_zero())
                .into(),
            _ => b
                .build_int_compare(IntPredicate::NE, x.into_int_value(), i32t.const_zero(), "")
                .unwrap()
                .into(),
        }
    }

    fn call(&self, f: FunctionValue<'ctx>, args: &[BasicValueEnum<'ctx>]) -> BasicValueEnum<'ctx> {
        math::call_value(&self.b, f, args)
    }

    /// max/min that propagate NaN (numpy and XLA semantics).
    fn fmax(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>, max: bool) -> FloatValue<'ctx> {
        let p = if max {
            FloatPredicate::OGT
        } else {
            FloatPredicate::OLT
        };
        let take_a = self
            .b
            .build_or(self.fcmp(p, a, b), self.fcmp(FloatPredicate::UNO, a, a), "")
            .unwrap();
        self.select(take_a, a.into(), b.into()).into_float_value()
    }

    fn fma(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        self.call(self.fmuladd, &[a.into(), b.into(), c.into()])
            .into_float_value()
    }

    fn unary(&self, u: UnaryOp, x: FloatValue<'ctx>) -> FloatValue<'ctx> {
        let b = &self.b;
        match u {
            UnaryOp::Negate => b.build_float_neg(x, "").unwrap(),
            UnaryOp::Abs => self.call(self.fabs, &[x.into()]).into_float_value(),
            UnaryOp::Sqrt => self.call(self.sqrt, &[x.into()]).into_float_value(),
            UnaryOp::Rsqrt => {
                let s = self.call(self.sqrt, &[x.into()]).into_float_value();
                b.build_float_div(self.f32c(1.0), s, "").unwrap()
            }
            UnaryOp::Exp => self
                .call(math::get(self.ctx, self.m, MathFn::Exp), &[x.into()])
                .into_float_value(),
            UnaryOp::Log => self
                .call(math::get(self.ctx, self.m, MathFn::Log), &[x.into()])
                .into_float_value(),
            UnaryOp::Tanh => self
                .call(math::get(self.ctx, self.m, MathFn::Tanh), &[x.into()])
                .into_float_value(),
            UnaryOp::Logistic => self
                .call(math::get(self.ctx, self.m, MathFn::Logistic), &[x.into()])
                .into_float_value(),
            UnaryOp::Erf => self
                .call(math::get(self.ctx, self.m, MathFn::Erf), &[x.into()])
                .into_float_value(),
        }
    }

    fn binary(&self, op: BinaryOp, x: FloatValue<'ctx>, y: FloatValue<'ctx>) -> FloatValue<'ctx> {
        let b = &self.b;
        match op {
            BinaryOp::Add => b.build_float_add(x, y, "").unwrap(),
            BinaryOp::Subtract => b.build_float_sub(x, y, "").unwrap(),
            BinaryOp::Multiply => b.build_float_mul(x, y, "").unwrap(),
            BinaryOp::Divide => b.build_float_div(x, y, "").unwrap(),
            BinaryOp::Maximum => self.fmax(x, y, true),
            BinaryOp::Minimum => self.fmax(x, y, false),
            BinaryOp::Power => self
                .call(
                    math::get(self.ctx, self.m, MathFn::Pow),
                    &[x.into(), y.into()],
                )
                .into_float_value(),
        }
    }

    fn combine(
        &self,
        kind: ReduceKind,
        acc: FloatValue<'ctx>,
        v: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        match kind {
            ReduceKind::Add => self.b.build_float_add(acc, v, "").unwrap(),
            ReduceKind::Max => self.fmax(acc, v, true),
            ReduceKind::Min => self.fmax(acc, v, false),
        }
    }

    fn identity(&self, kind: ReduceKind) -> FloatValue<'ctx> {
        match kind {
            ReduceKind::Add => self.f32c(0.0),
            ReduceKind::Max => self.f32c(f64::NEG_INFINITY),
            ReduceKind::Min => self.f32c(f64::INFINITY),
        }
    }

    /// Input position `o·stride + t·dilation - pad_low` along dim `d` of a window.
    fn window_pos(
        &self,
        o: IntValue<'ctx>,
        t: IntValue<'ctx>,
        window: &crate::ir::Window,
        d: usize,
    ) -> IntValue<'ctx> {
        let base = self
            .b
            .build_int_mul(o, self.i64(window.stride[d] as u64), "")
            .unwrap();
        let tap = self
            .b
            .build_int_mul(t, self.i64(window.dilation[d] as u64), "")
            .unwrap();
        let p = self.b.build_int_add(base, tap, "").unwrap();
        self.b
            .build_int_sub(p, self.i64(window.pad_low[d] as u64), "")
            .unwrap()
    }

    /// `lo <= i < hi` for a signed index.
    fn in_range(&self, i: IntValue<'ctx>, hi: usize) -> IntValue<'ctx> {
        let ge = self
            .b
            .build_int_compare(IntPredicate::SGE, i, self.i64(0), "")
            .unwrap();
        let lt = self
            .b
            .build_int_compare(IntPredicate::SLT, i, self.i64(hi as u64), "")
            .unwrap();
        self.b.build_and(ge, lt, "").unwrap()
    }

    /// `i` clamped into `[0, hi)` (so a load is always in bounds, and its value may be discarded).
    fn clamp_index(&self, i: IntValue<'ctx>, hi: usize) -> IntValue<'ctx> {
        let neg = self
            .b
            .build_int_compare(IntPredicate::SLT, i, self.i64(0), "")
            .unwrap();
        let i = self
            .select(neg, self.i64(0).into(), i.into())
            .into_int_value();
        let big = self
            .b
            .build_int_compare(IntPredicate::SGE, i, self.i64(hi as u64), "")
            .unwrap();
        self.select(big, self.i64(hi as u64 - 1).into(), i.into())
            .into_int_value()
    }

    // ---- module structure ---------------------------------------------------------------------------

    fn build(&mut self) -> Result<Vec<KernelInfo>, CodegenError> {
        let c = &self.hlo.entry;
        let outputs: Vec<InstId> = c.outputs.iter().map(|o| o.value).collect();
        for (i, inst) in c.instructions.iter().enumerate() {
            let at_the_boundary =
                matches!(inst.op, Op::Parameter { .. }) || outputs.contains(&InstId(i as u32));
            if at_the_boundary && !is_row_major(&inst.shape) {
                return Err(CodegenError::Unsupported {
                    inst: inst.name.clone(),
                    reason: format!(
                        "layout {} is not row-major; inputs and outputs of the C API are row-major",
                        inst.shape
                    ),
                });
            }
            if !inst.shape.dtype.is_supported() {
                return Err(CodegenError::Unsupported {
                    inst: inst.name.clone(),
                    reason: format!("dtype {} has no codegen", inst.shape.dtype),
                });
            }
        }
        self.packed = (0..c.instructions.len())
            .map(|i| {
                !self.grid
                    && matches!(c.instructions[i].op, Op::Constant(_))
                    && self.packing_of(InstId(i as u32)).is_some()
            })
            .collect();
        // Weights and constants: private read-only globals (raw bytes, cache-line aligned).
        let mut globals: Vec<Option<PointerValue<'ctx>>> = vec![None; c.instructions.len()];
        for (i, inst) in c.instructions.iter().enumerate() {
            if let (false, Op::Constant(lit)) = (self.ptx, &inst.op) {
                let Some(bytes) = lit.bytes() else {
                    return Err(CodegenError::Unsupported {
                        inst: inst.name.clone(),
                        reason: "the constant's data was elided in the HLO text".into(),
                    });
                };
                // Weights are stored in their assigned layout, or as the GEMM panels of the dots
                // reading them: re-laid here, at compile time.
                let nr = gemm::Tiles::for_target(self.target).nr();
                let packing = self.packing_of(InstId(i as u32)).filter(|_| self.packed[i]);
                let physical = match packing {
                    Some(Packing::Gemm(d)) => gemm::pack(bytes, &inst.shape, &d, nr),
                    Some(Packing::Conv) => conv::pack(
                        bytes,
                        &inst.shape,
                        conv::panel_width(
                            inst.shape.dims[0],
                            &gemm::Tiles::for_target(self.target),
                        ),
                    ),
                    None => relayout(bytes, &inst.shape),
                };
                let init = self.ctx.const_string(&physical, false);
                let g = self.m.add_global(
                    init.get_type(),
                    Some(AddressSpace::default()),
                    &format!("{}.const.{i}", self.hlo.name),
                );
                g.set_initializer(&init);
                g.set_constant(true);
                g.set_linkage(Linkage::Private);
                g.set_unnamed_addr(true);
                g.set_alignment(ARENA_ALIGN as u32);
                globals[i] = Some(g.as_pointer_value());
            }
        }
        // The kernels.
        let mut kernels = Vec::new();
        let mut calls: Vec<(FunctionValue<'ctx>, Vec<InstId>, Loc, usize)> = Vec::new();
        for (i, inst) in c.instructions.iter().enumerate() {
            let id = InstId(i as u32);
            let loc = self.plan.locs[i];
            if matches!(inst.op, Op::Parameter { .. } | Op::Constant(_))
                || matches!(loc, Loc::Alias(_))
            {
                continue;
            }
            let name = format!(
                "{}_k{}_{}",
                self.hlo.name,
                kernels.len(),
                crate::util::c_name::c_chars(&inst.name)
            );
            let f = self.kernel(&name, id)?;
            let ops = match &inst.op {
                Op::Fusion { computation, .. } => computation
                    .instructions
                    .iter()
                    .filter(|i| !matches!(i.op, Op::Parameter { .. }))
                    .map(|i| i.name.clone())
                    .collect(),
                _ => vec![inst.name.clone()],
            };
            let (reads, weight_reads) = traffic(c, &inst.operands);
            kernels.push(KernelInfo {
                name,
                ops,
                reads,
                weight_reads,
                writes: inst.shape.size_bytes(),
                flops: crate::ir::flops::flops(c, id),
            });
            let invocations = self.grid_size.take().unwrap_or(inst.shape.element_count());
            calls.push((f, inst.operands.clone(), loc, invocations));
        }
        for &(k, v) in &self.plan.copies {
            let name = format!("{}_copy_out{k}", self.hlo.name);
            let f = self.copy_kernel(
                &name,
                c.inst(v).shape.dtype,
                c.inst(v).shape.element_count(),
            );
            let (reads, weight_reads) = traffic(c, &[v]);
            kernels.push(KernelInfo {
                name,
                ops: vec![c.inst(v).name.clone()],
                reads,
                weight_reads,
                writes: c.inst(v).shape.size_bytes(),
                flops: 0,
            });
            calls.push((f, vec![v], Loc::Output(k), c.inst(v).shape.element_count()));
        }
        self.gid.set(None);
        if self.ptx {
            for (f, operands, loc, elements) in &calls {
                let launch = GridLaunch {
                    entry: self.ptx_entry(*f),
                    elements: *elements,
                    out: *loc,
                    operands: operands.iter().map(|&o| root(&self.plan.locs, o)).collect(),
                };
                self.ptx_entries.borrow_mut().push(launch);
            }
            return Ok(kernels);
        }
        self.entry_points(&globals, &calls);
        if !self.variant {
            self.parallel_setter();
        }
        Ok(kernels)
    }

    /// The exported `<name>_run_ptrs` / `<name>_run` and the internal body they share.
    fn entry_points(
        &self,
        globals: &[Option<PointerValue<'ctx>>],
        calls: &[(FunctionValue<'ctx>, Vec<InstId>, Loc, usize)],
    ) {
        let c = &self.hlo.entry;
        let params = c.parameters();
        let nin = params.len();
        let nout = c.outputs.len();
        let i8p = self.i8p();
        let i32t = self.ctx.i32_type();
        // impl(arena, in0.., out0..)
        let impl_args: Vec<BasicMetadataTypeEnum> =
            (0..1 + nin + nout).map(|_| i8p.into()).collect();
        let imp = self.m.add_function(
            &format!("{}_impl", self.hlo.name),
            self.ctx.void_type().fn_type(&impl_args, false),
            Some(Linkage::Internal),
        );
        self.common_attrs(imp);
        self.b
            .position_at_end(self.ctx.append_basic_block(imp, "entry"));
        let arena = imp.get_nth_param(0).unwrap().into_pointer_value();
        let input = |k: usize| {
            imp.get_nth_param(1 + k as u32)
                .unwrap()
                .into_pointer_value()
        };
        let output = |k: usize| {
            imp.get_nth_param(1 + (nin + k) as u32)
                .unwrap()
                .into_pointer_value()
        };
        let ptr_of = |v: InstId| -> PointerValue<'ctx> {
            let r = root(&self.plan.locs, v);
            let p = match self.plan.locs[r.index()] {
                Loc::Input(k) => input(k),
                Loc::Output(k) => output(k),
                Loc::Constant => globals[r.index()].expect("constants have globals"),
                Loc::Arena(off) => self.gep(arena, self.i64(off as u64)),
                Loc::Alias(_) => unreachable!("root() follows aliases"),
            };
            let ty = self.ptr_type(c.inst(v).shape.dtype);
            self.b.build_pointer_cast(p, ty, "").unwrap()
        };
        for (f, operands, loc, elements) in calls {
            let out = match loc {
                Loc::Output(k) => *k,
                _ => usize::MAX,
            };
            let out_ptr = match loc {
                Loc::Output(_) => output(out),
                Loc::Arena(off) => self.gep(arena, self.i64(*off as u64)),
                _ => unreachable!("kernels write to outputs or the arena"),
            };
            let out_ty = f.get_nth_param(0).unwrap().get_type().into_pointer_type();
            let mut args: Vec<BasicValueEnum> = vec![
                self.b
                    .build_pointer_cast(out_ptr, out_ty, "")
                    .unwrap()
                    .into(),
            ];
            args.extend(operands.iter().map(|&o| BasicValueEnum::from(ptr_of(o))));
            let a: Vec<_> = args.iter().map(|&v| v.into()).collect();
            if self.grid {
                // Host emulation of a GPU grid: one call per output element.
                self.for_loop(*elements, &mut |cg, gid| {
                    let mut a = a.clone();
                    a.push(gid.into());
                    cg.b.build_call(*f, &a, "").unwrap();
                });
            } else {
                self.b.build_call(*f, &a, "").unwrap();
            }
        }
        self.b.build_return(None).unwrap();

        let status = |s: Status| i32t.const_int(s.code() as i64 as u64, true);
        // Checks shared by both entry points: a null pointer or a misaligned arena is a status.
        let check_arena = |f: FunctionValue<'ctx>, arena: PointerValue<'ctx>| {
            let bad_null = self.ctx.append_basic_block(f, "null");
            let bad_align = self.ctx.append_basic_block(f, "misaligned");
            let ok = self.ctx.append_basic_block(f, "arena_ok");
            let ok2 = self.ctx.append_basic_block(f, "aligned");
            let is_null = self.b.build_is_null(arena, "").unwrap();
            self.b
                .build_conditional_branch(is_null, bad_null, ok)
                .unwrap();
            self.b.position_at_end(bad_null);
            self.b
                .build_return(Some(&status(Status::NullPointer)))
                .unwrap();
            self.b.position_at_end(ok);
            let mis = self.is_misaligned(arena);
            self.b
                .build_conditional_branch(mis, bad_align, ok2)
                .unwrap();
            self.b.position_at_end(bad_align);
            self.b
                .build_return(Some(&status(Status::MisalignedArena)))
                .unwrap();
            self.b.position_at_end(ok2);
        };
        let check_null = |f: FunctionValue<'ctx>, p: PointerValue<'ctx>| {
            let bad = self.ctx.append_basic_block(f, "null");
            let ok = self.ctx.append_basic_block(f, "ok");
            let is_null = self.b.build_is_null(p, "").unwrap();
            self.b.build_conditional_branch(is_null, bad, ok).unwrap();
            self.b.position_at_end(bad);
            self.b
                .build_return(Some(&status(Status::NullPointer)))
                .unwrap();
            self.b.position_at_end(ok);
        };

        // int <name>_run_ptrs(void *arena, const void *const *inputs, void *const *outputs)
        let i8pp = i8p.ptr_type(AddressSpace::default());
        let rp = self.m.add_function(
            &format!("{}_run_ptrs", self.hlo.name),
            i32t.fn_type(&[i8p.into(), i8pp.into(), i8pp.into()], false),
            Some(Linkage::External),
        );
        self.common_attrs(rp);
        self.b
            .position_at_end(self.ctx.append_basic_block(rp, "entry"));
        let arena = rp.get_nth_param(0).unwrap().into_pointer_value();
        check_arena(rp, arena);
        let ins = rp.get_nth_param(1).unwrap().into_pointer_value();
        let outs = rp.get_nth_param(2).unwrap().into_pointer_value();
        check_null(rp, ins);
        check_null(rp, outs);
        let mut args: Vec<BasicValueEnum> = vec![arena.into()];
        for (arr, n) in [(ins, nin), (outs, nout)] {
            for k in 0..n {
                let p = self
                    .b
                    .build_load(self.gep(arr, self.i64(k as u64)), "")
                    .unwrap()
                    .into_pointer_value();
                check_null(rp, p);
                args.push(p.into());
            }
        }
        let a: Vec<_> = args.iter().map(|&v| v.into()).collect();
        self.b.build_call(imp, &a, "").unwrap();
        self.b.build_return(Some(&status(Status::Ok))).unwrap();

        // int <name>_run(void *arena, const T *in0, ..., T *out0, ...)
        let mut tys: Vec<BasicMetadataTypeEnum> = vec![i8p.into()];
        for &p in &params {
            tys.push(self.ptr_type(c.inst(p).shape.dtype).into());
        }
        for o in &c.outputs {
            tys.push(self.ptr_type(c.inst(o.value).shape.dtype).into());
        }
        let run = self.m.add_function(
            &format!("{}_run", self.hlo.name),
            i32t.fn_type(&tys, false),
            Some(Linkage::External),
        );
        self.common_attrs(run);
        self.b
            .position_at_end(self.ctx.append_basic_block(run, "entry"));
        let arena = run.get_nth_param(0).unwrap().into_pointer_value();
        check_arena(run, arena);
        let mut args: Vec<BasicValueEnum> = vec![arena.into()];
        for k in 0..nin + nout {
            let p = run
                .get_nth_param(1 + k as u32)
                .unwrap()
                .into_pointer_value();
            check_null(run, p);
            args.push(self.b.build_pointer_cast(p, i8p, "").unwrap().into());
        }
        let a: Vec<_> = args.iter().map(|&v| v.into()).collect();
        self.b.build_call(imp, &a, "").unwrap();
        self.b.build_return(Some(&status(Status::Ok))).unwrap();
    }

    /// Declares a kernel `void name(T* noalias out, U* noalias in0, ...)`.
    /// `shared[j]`: operand `j` occupies the output's bytes (in-place reuse), so neither it nor
    /// the output may be `noalias`.
    /// The dot or convolution computed by entry instruction `id` (itself, or the heavy op of an
    /// output fusion): the op, the entry instructions feeding its two operands, its result shape.
    fn heavy_in(&self, id: InstId) -> Option<(Op, InstId, InstId, Shape)> {
        let inst = self.hlo.entry.inst(id);
        match &inst.op {
            Op::Dot(_) | Op::Convolution { .. } => Some((
                inst.op.clone(),
                inst.operands[0],
                inst.operands[1],
                inst.shape.clone(),
            )),
            Op::Fusion {
                kind: FusionKind::Output,
                computation,
            } => computation.instructions.iter().find_map(|h| match &h.op {
                Op::Dot(_) | Op::Convolution { .. } => {
                    let param = |o: InstId| match computation.inst(o).op {
                        Op::Parameter { index } => Some(inst.operands[index]),
                        _ => None,
                    };
                    Some((
                        h.op.clone(),
                        param(h.operands[0])?,
                        param(h.operands[1])?,
                        h.shape.clone(),
                    ))
                }
                _ => None,
            }),
            _ => None,
        }
    }

    /// How constant `c` is stored packed, if every use of it is as the weight operand of a dot or
    /// convolution that reads it packed, all the same way.
    fn packing_of(&self, c: InstId) -> Option<Packing> {
        let e = &self.hlo.entry;
        if e.outputs.iter().any(|o| o.value == c) || e.inst(c).shape.dtype != DType::F32 {
            return None;
        }
        let mut packing: Option<Packing> = None;
        for (i, inst) in e.instructions.iter().enumerate() {
            let uses = inst.operands.iter().filter(|&&o| o == c).count();
            if uses == 0 {
                continue;
            }
            let (op, lhs, rhs, out) = self.heavy_in(InstId(i as u32))?;
            if uses != 1 || rhs != c || lhs == c {
                return None;
            }
            let (ls, rs) = (&e.inst(lhs).shape, &e.inst(rhs).shape);
            let this = match &op {
                Op::Dot(d) => {
                    let g = gemm::geometry(d, ls, rs, &out)?;
                    if !gemm::packable(&g) {
                        return None;
                    }
                    Packing::Gemm(d.clone())
                }
                Op::Convolution {
                    window,
                    feature_group_count,
                } => match conv::choose(window, *feature_group_count, ls, rs, &out, true)? {
                    conv::ConvPath::PixelsByChannels => Packing::Conv,
                    _ => return None,
                },
                _ => return None,
            };
            match &packing {
                Some(p) if *p != this => return None,
                _ => packing = Some(this),
            }
        }
        packing
    }

    fn declare_kernel(
        &self,
        name: &str,
        out: DType,
        ins: &[DType],
        shared: &[bool],
    ) -> Kernel<'ctx> {
        let mut tys: Vec<BasicMetadataTypeEnum> = vec![self.ptr_type(out).into()];
        tys.extend(
            ins.iter()
                .map(|&d| BasicMetadataTypeEnum::from(self.ptr_type(d))),
        );
        let nbufs = tys.len();
        if self.grid {
            tys.push(self.ctx.i64_type().into());
        }
        // Host grid kernels are exported: the fake CUDA driver of the launcher tests runs them
        // as the GPU would run their PTX (`tests/harness/fake_cuda.c`).
        let linkage = if self.grid && !self.ptx {
            Linkage::External
        } else {
            Linkage::Internal
        };
        let f = self.m.add_function(
            name,
            self.ctx.void_type().fn_type(&tys, false),
            Some(linkage),
        );
        self.common_attrs(f);
        // Kernels stay functions after O3: a kernel boundary shows up in profiles and dumps, and
        // a call per kernel per run costs nothing next to its loops.
        if !self.ptx {
            f.add_attribute(AttributeLoc::Function, self.attr("noinline"));
        }
        let mut noalias = Vec::with_capacity(tys.len());
        let any_shared = shared.iter().any(|&s| s);
        for p in 0..nbufs as u32 {
            let is_shared = if p == 0 {
                any_shared
            } else {
                shared.get(p as usize - 1).copied().unwrap_or(false)
            };
            if !is_shared {
                f.add_attribute(AttributeLoc::Param(p), self.attr("noalias"));
            }
            noalias.push(!is_shared);
            f.add_attribute(AttributeLoc::Param(p), self.attr("nocapture"));
            if p > 0 && !is_shared {
                f.add_attribute(AttributeLoc::Param(p), self.attr("readonly"));
            }
        }
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        self.gid.set(
            self.grid
                .then(|| f.get_nth_param(nbufs as u32).unwrap().into_int_value()),
        );
        Kernel {
            f,
            out: f.get_nth_param(0).unwrap().into_pointer_value(),
            args: (1..nbufs as u32)
                .map(|p| f.get_nth_param(p).unwrap().into_pointer_value())
                .collect(),
            noalias,
        }
    }

    fn copy_kernel(&self, name: &str, d: DType, n: usize) -> FunctionValue<'ctx> {
        let k = self.declare_kernel(name, d, &[d], &[false]);
        let mut copy = |cg: &Self, i: IntValue<'ctx>| {
            let v = cg.b.build_load(cg.gep(k.args[0], i), "").unwrap();
            cg.b.build_store(cg.gep(k.out, i), v).unwrap();
        };
        match self.gid.get() {
            Some(gid) => {
                let inside = self
                    .b
                    .build_int_compare(IntPredicate::ULT, gid, self.i64(n as u64), "")
                    .unwrap();
                self.if_then(inside, &mut |cg| copy(cg, gid));
            }
            None => self.for_loop(n, &mut copy),
        }
        self.b.build_return(None).unwrap();
        k.f
    }

    /// The kernel computing instruction `id`.
    fn kernel(&self, name: &str, id: InstId) -> Result<FunctionValue<'ctx>, CodegenError> {
        let c = &self.hlo.entry;
        let inst = c.inst(id);
        let ins: Vec<DType> = inst
            .operands
            .iter()
            .map(|&o| c.inst(o).shape.dtype)
            .collect();
        let shared: Vec<bool> = inst
            .operands
            .iter()
            .map(|&o| self.plan.in_place[id.index()] == Some(o))
            .collect();
        let k = self.declare_kernel(name, inst.shape.dtype, &ins, &shared);
        *self.scalar_consts.borrow_mut() = inst
            .operands
            .iter()
            .map(|&o| match &c.inst(o).op {
                Op::Constant(lit)
                    if lit.dtype == DType::F32 && lit.dims.iter().product::<usize>() == 1 =>
                {
                    lit.to_f32_vec().and_then(|v| v.first().copied())
                }
                _ => None,
            })
            .collect();
        let rhs_packed = self
            .heavy_in(id)
            .is_some_and(|(_, _, rhs, _)| self.packed[rhs.index()]);
        self.packed_rhs.set(rhs_packed);
        let tiled = match &inst.op {
            Op::Dot(d) if self.grid => tiled::tiled_geometry(
                d,
                &c.inst(inst.operands[0]).shape,
                &c.inst(inst.operands[1]).shape,
                &inst.shape,
            ),
            _ => None,
        };
        let operand_shape = |j: usize| &c.inst(inst.operands[j]).shape;
        match &inst.op {
            Op::Convolution {
                window,
                feature_group_count,
            } if self.grid
                && tiled::conv_pays(
                    *feature_group_count,
                    operand_shape(0),
                    operand_shape(1),
                    &inst.shape,
                ) =>
            {
                self.conv_tiled(
                    &k,
                    window,
                    (operand_shape(0), operand_shape(1), &inst.shape),
                    (k.args[0], k.args[1]),
                    None,
                )
            }
            Op::Dot(d) if tiled.is_some() => {
                let dims = tiled::out_dims(d, &c.inst(inst.operands[0]).shape, &inst.shape);
                self.dot_tiled(
                    &k,
                    tiled.as_ref().unwrap(),
                    (k.args[0], k.args[1]),
                    (dims.0, dims.1, dims.2),
                    None,
                )
            }
            Op::Fusion { kind, computation } => self.fused_body(&k, *kind, computation),
            Op::Reduce { kind, dimensions }
                if !self.grid
                    && self.reduce_in_registers(
                        &k,
                        *kind,
                        dimensions,
                        &inst.shape,
                        &c.inst(inst.operands[0]).shape,
                        0,
                        &epilogue::RegEpilogue { steps: vec![] },
                    ) => {}
            _ => {
                let shapes: Vec<Shape> = inst
                    .operands
                    .iter()
                    .map(|&o| c.inst(o).shape.clone())
                    .collect();
                let at = |j: usize, ix: Ix<'_, 'ctx>| self.load_ix(k.args[j], ix, &shapes[j]);
                self.body(&k, &inst.op, &inst.shape, &shapes, &at, &k.args);
            }
        }
        self.b.build_return(None).unwrap();
        Ok(k.f)
    }

    /// Loads element `ix` of a buffer of shape `s`.
    fn load_ix(&self, p: PointerValue<'ctx>, ix: Ix<'_, 'ctx>, s: &Shape) -> BasicValueEnum<'ctx> {
        let off = match ix {
            Ix::Multi(idx) => self.offset(idx, s),
            Ix::Linear(off) if is_row_major(s) => off,
            Ix::Linear(off) => self.offset(&self.unravel(off, &s.dims), s),
        };
        self.load(p, off, s.dtype)
    }

    /// The row-major multi-index of linear offset `off` in `dims`.
    fn unravel(&self, off: IntValue<'ctx>, dims: &[usize]) -> Vec<IntValue<'ctx>> {
        let strides = row_major_strides(dims);
        let mut rest = off;
        let mut idx = Vec::with_capacity(dims.len());
        for &st in &strides {
            let q = self
                .b
                .build_int_unsigned_div(rest, self.i64(st), "")
                .unwrap();
            rest = self
                .b
                .build_int_unsigned_rem(rest, self.i64(st), "")
                .unwrap();
            idx.push(q);
        }
        idx
    }

    /// A fused kernel: the fused computation's parameter `i` is kernel argument `i`.
    fn fused_body(&self, k: &Kernel<'ctx>, kind: FusionKind, comp: &Computation) {
        let root = comp.inst(comp.outputs[0].value);
        let shapes = |inst: &Instruction| -> Vec<Shape> {
            inst.operands
                .iter()
                .map(|&o| comp.inst(o).shape.clone())
                .collect()
        };
        match kind {
            FusionKind::Loop => {
                let id = comp.outputs[0].value;
                self.loop_nest_physical(&root.shape, &mut |cg, idx| {
                    let v = cg.value_of(comp, id, Ix::Multi(idx), k, None);
                    cg.store(k.out, cg.offset(idx, &root.shape), v, root.shape.dtype);
                });
            }
            FusionKind::Input => {
                if let (false, Op::Reduce { kind, dimensions }) = (self.grid, &root.op) {
                    if let Some((chain, param)) =
                        epilogue::recognize_operand(comp, root.operands[0])
                    {
                        let xs = comp
                            .instructions
                            .iter()
                            .find(|i| i.op == Op::Parameter { index: param })
                            .map(|i| i.shape.clone())
                            .expect("the chain ends at a parameter");
                        if self.reduce_in_registers(
                            k,
                            *kind,
                            dimensions,
                            &root.shape,
                            &xs,
                            param,
                            &chain,
                        ) {
                            return;
                        }
                    }
                }
                let at =
                    |j: usize, ix: Ix<'_, 'ctx>| self.value_of(comp, root.operands[j], ix, k, None);
                self.body(k, &root.op, &root.shape, &shapes(root), &at, &[]);
            }
            FusionKind::Output => {
                let heavy = comp
                    .ids()
                    .find(|&i| matches!(comp.inst(i).op, Op::Dot(_) | Op::Convolution { .. }))
                    .expect("an output fusion holds a dot or convolution");
                let h = comp.inst(heavy);
                // The heavy op's operands are parameters of the fusion: read their buffers.
                let bufs: Vec<PointerValue<'ctx>> = h
                    .operands
                    .iter()
                    .map(|&o| match comp.inst(o).op {
                        Op::Parameter { index } => k.args[index],
                        _ => unreachable!(
                            "fusion never inlines the operands of a dot or convolution"
                        ),
                    })
                    .collect();
                let no_at = |_: usize, _: Ix<'_, 'ctx>| -> BasicValueEnum<'ctx> {
                    unreachable!("dot and convolution read buffers")
                };
                let id = comp.outputs[0].value;
                // On the GPU a large enough product runs tiled, each thread finishing its element
                // with the epilogue (the root must have the dot's shape: it is computed where the
                // dot's value was stored).
                let same_place = root.shape.dims == h.shape.dims
                    && root.shape.layout == h.shape.layout
                    && root.shape.dtype == h.shape.dtype;
                let finish = |cg: &Self, idx: &[IntValue<'ctx>]| {
                    let v = cg.value_of(comp, id, Ix::Multi(idx), k, Some(heavy));
                    cg.store(k.out, cg.offset(idx, &root.shape), v, root.shape.dtype);
                };
                let (l, r) = (
                    &comp.inst(h.operands[0]).shape,
                    &comp.inst(h.operands[1]).shape,
                );
                match &h.op {
                    Op::Dot(d) if self.grid && same_place => {
                        if let Some(g) = tiled::tiled_geometry(d, l, r, &h.shape) {
                            let dims = tiled::out_dims(d, l, &h.shape);
                            self.dot_tiled(k, &g, (bufs[0], bufs[1]), dims, Some(&finish));
                            return;
                        }
                    }
                    Op::Convolution {
                        window,
                        feature_group_count,
                    } if self.grid
                        && same_place
                        && tiled::conv_pays(*feature_group_count, l, r, &h.shape) =>
                    {
                        let shapes = (l, r, &h.shape);
                        self.conv_tiled(k, window, shapes, (bufs[0], bufs[1]), Some(&finish));
                        return;
                    }
                    _ => {}
                }
                // A chain of per-channel / scalar steps is applied to the accumulators before they
                // are stored (`cpu/epilogue.rs`); otherwise the epilogue sweeps the output.
                self.reg_epi
                    .replace(epilogue::recognize(comp, heavy).filter(|_| !self.grid));
                self.epi_applied.set(false);
                self.body(k, &h.op, &h.shape, &shapes(h), &no_at, &bufs);
                self.reg_epi.replace(None);
                if self.epi_applied.get() {
                    return;
                }
                // The epilogue, in place: the heavy value is read back from the output buffer.
                self.loop_nest_physical(&root.shape, &mut |cg, idx| {
                    let v = cg.value_of(comp, id, Ix::Multi(idx), k, Some(heavy));
                    cg.store(k.out, cg.offset(idx, &root.shape), v, root.shape.dtype);
                });
            }
        }
    }

    /// The value of fused instruction `id` at `ix`, computed inline from the kernel arguments.
    fn value_of(
        &self,
        comp: &Computation,
        id: InstId,
        ix: Ix<'_, 'ctx>,
        k: &Kernel<'ctx>,
        heavy: Option<InstId>,
    ) -> BasicValueEnum<'ctx> {
        let inst = comp.inst(id);
        if Some(id) == heavy {
            return self.load_ix(k.out, ix, &inst.shape);
        }
        if let Op::Parameter { index } = inst.op {
            return self.load_ix(k.args[index], ix, &inst.shape);
        }
        let idx = match ix {
            Ix::Multi(idx) => idx.to_vec(),
            Ix::Linear(off) => self.unravel(off, &inst.shape.dims),
        };
        let shapes: Vec<Shape> = inst
            .operands
            .iter()
            .map(|&o| comp.inst(o).shape.clone())
            .collect();
        let at = |j: usize, sub: Ix<'_, 'ctx>| self.value_of(comp, inst.operands[j], sub, k, heavy);
        self.elemental(&inst.op, &inst.shape, &shapes, &idx, &at)
    }

    /// The loops computing `op` into `k.out`: operands of elemental ops, reductions and argmax come
    /// from `at`; dot and convolution read the buffers `bufs`.
    fn body(
        &self,
        k: &Kernel<'ctx>,
        op: &Op,
        shape: &Shape,
        opnds: &[Shape],
        at: &dyn Fn(usize, Ix<'_, 'ctx>) -> BasicValueEnum<'ctx>,
        bufs: &[PointerValue<'ctx>],
    ) {
        let out_dims = shape.dims.clone();
        let odt = shape.dtype;
        let opnd = |j: usize| &opnds[j];
        match op {
            Op::Reduce { kind, dimensions }
                if !self.grid
                    && opnd(0)
                        .layout
                        .minor_to_major
                        .first()
                        .is_some_and(|d| !dimensions.contains(d)) =>
            {
                // The input's minor-most dim is kept (a spatial reduction of NHWC data): walk the
                // input in memory order and accumulate into the output, so the inner loop runs
                // along contiguous kept elements and vectorizes. Each output element still sums
                // its inputs one at a time, in order.
                let kept: Vec<usize> = (0..opnd(0).rank())
                    .filter(|d| !dimensions.contains(d))
                    .collect();
                self.loop_nest_physical(shape, &mut |cg, oidx| {
                    cg.store(
                        k.out,
                        cg.offset(oidx, shape),
                        cg.identity(*kind).into(),
                        odt,
                    );
                });
                self.loop_nest_physical(opnd(0), &mut |cg, xidx| {
                    let oidx: Vec<IntValue<'ctx>> = kept.iter().map(|&d| xidx[d]).collect();
                    let off = cg.offset(&oidx, shape);
                    let a = cg.load(k.out, off, odt).into_float_value();
                    let v = at(0, Ix::Multi(xidx)).into_float_value();
                    cg.store(k.out, off, cg.combine(*kind, a, v).into(), odt);
                });
            }
            Op::Reduce { kind, dimensions }
                if !self.grid
                    && dimensions.len() == 1
                    && opnd(0).layout.minor_to_major.first() == Some(&dimensions[0])
                    && opnd(0).dims[dimensions[0]] >= 2 * REDUCE_PARTIALS =>
            {
                // A reduction along the contiguous dim (softmax, layer norm): REDUCE_PARTIALS
                // running values over elements j ≡ p (mod REDUCE_PARTIALS), combined by a fixed
                // tree at the end. Independent chains hide the add latency and vectorize; the
                // association is the same on every target.
                let x = opnd(0).dims.clone();
                let rd = dimensions[0];
                let len = x[rd];
                let kept: Vec<usize> = (0..x.len()).filter(|&d| d != rd).collect();
                let accs: Vec<PointerValue<'ctx>> = (0..REDUCE_PARTIALS)
                    .map(|_| self.slot(k.f, self.ctx.f32_type().into()))
                    .collect();
                self.loop_nest_physical(shape, &mut |cg, oidx| {
                    let at_j = |cg: &Self, j: IntValue<'ctx>| {
                        let mut full = vec![cg.i64(0); x.len()];
                        for (k2, &d) in kept.iter().enumerate() {
                            full[d] = oidx[k2];
                        }
                        full[rd] = j;
                        at(0, Ix::Multi(&full)).into_float_value()
                    };
                    for &a in &accs {
                        cg.b.build_store(a, cg.identity(*kind)).unwrap();
                    }
                    cg.for_loop(len / REDUCE_PARTIALS, &mut |cg, blk| {
                        let j0 =
                            cg.b.build_int_mul(blk, cg.i64(REDUCE_PARTIALS as u64), "")
                                .unwrap();
                        for (p, &a) in accs.iter().enumerate() {
                            let j = cg.b.build_int_add(j0, cg.i64(p as u64), "").unwrap();
                            let v = at_j(cg, j);
                            let old = cg.b.build_load(a, "").unwrap().into_float_value();
                            cg.b.build_store(a, cg.combine(*kind, old, v)).unwrap();
                        }
                    });
                    let tail = len / REDUCE_PARTIALS * REDUCE_PARTIALS;
                    for (p, &a) in accs.iter().enumerate().take(len % REDUCE_PARTIALS) {
                        let v = at_j(cg, cg.i64((tail + p) as u64));
                        let old = cg.b.build_load(a, "").unwrap().into_float_value();
                        cg.b.build_store(a, cg.combine(*kind, old, v)).unwrap();
                    }
                    let mut vals: Vec<FloatValue<'ctx>> = accs
                        .iter()
                        .map(|&a| cg.b.build_load(a, "").unwrap().into_float_value())
                        .collect();
                    while vals.len() > 1 {
                        vals = vals
                            .chunks(2)
                            .map(|pair| cg.combine(*kind, pair[0], pair[1]))
                            .collect();
                    }
                    cg.store(k.out, cg.offset(oidx, shape), vals[0].into(), odt);
                });
            }
            Op::Reduce { kind, dimensions } => {
                let x = opnd(0).dims.clone();
                let kept: Vec<usize> = (0..x.len()).filter(|d| !dimensions.contains(d)).collect();
                let red: Vec<usize> = dimensions.iter().map(|&d| x[d]).collect();
                let acc = self.slot(k.f, self.ctx.f32_type().into());
                self.loop_nest_physical(shape, &mut |cg, oidx| {
                    cg.b.build_store(acc, cg.identity(*kind)).unwrap();
                    cg.loop_nest(&red, &mut |cg, ridx| {
                        let mut full = vec![cg.i64(0); x.len()];
                        for (k2, &d) in kept.iter().enumerate() {
                            full[d] = oidx[k2];
                        }
                        for (k2, &d) in dimensions.iter().enumerate() {
                            full[d] = ridx[k2];
                        }
                        let v = at(0, Ix::Multi(&full)).into_float_value();
                        let a = cg.b.build_load(acc, "").unwrap().into_float_value();
                        cg.b.build_store(acc, cg.combine(*kind, a, v)).unwrap();
                    });
                    let a = cg.b.build_load(acc, "").unwrap();
                    cg.store(k.out, cg.offset(oidx, shape), a, odt);
                });
            }
            Op::ReduceWindow { kind, window }
                if !self.grid
                    && shape.layout.minor_to_major.first().is_some_and(|&m| {
                        opnd(0).layout.minor_to_major.first() == Some(&m)
                            && window.size[m] == 1
                            && window.stride[m] == 1
                            && window.pad_low[m] == 0
                            && window.pad_high[m] == 0
                            && window.dilation[m] == 1
                    }) =>
            {
                // Pooling of channels-minor data: per output pixel and window tap (the validity
                // test hoisted), the innermost loop runs along the contiguous channels and
                // accumulates into the output, so it vectorizes. Each output element combines its
                // taps in the same order as the loop below.
                let x = opnd(0).dims.clone();
                let m = shape.layout.minor_to_major[0];
                let order: Vec<usize> = shape
                    .layout
                    .minor_to_major
                    .iter()
                    .rev()
                    .copied()
                    .filter(|&d| d != m)
                    .collect();
                let outer: Vec<usize> = order.iter().map(|&d| shape.dims[d]).collect();
                self.loop_nest(&outer, &mut |cg, o| {
                    let mut oidx = vec![cg.i64(0); x.len()];
                    for (k2, &d) in order.iter().enumerate() {
                        oidx[d] = o[k2];
                    }
                    cg.for_loop(x[m], &mut |cg, c| {
                        let mut idx = oidx.clone();
                        idx[m] = c;
                        cg.store(
                            k.out,
                            cg.offset(&idx, shape),
                            cg.identity(*kind).into(),
                            odt,
                        );
                    });
                    cg.loop_nest(&window.size, &mut |cg, tidx| {
                        let mut valid = cg.ctx.bool_type().const_int(1, false);
                        let mut pos = Vec::with_capacity(x.len());
                        for d in 0..x.len() {
                            let p = cg.window_pos(oidx[d], tidx[d], window, d);
                            if d != m {
                                valid = cg.b.build_and(valid, cg.in_range(p, x[d]), "").unwrap();
                            }
                            pos.push(p);
                        }
                        cg.if_then(valid, &mut |cg| {
                            cg.for_loop(x[m], &mut |cg, c| {
                                let mut ipos = pos.clone();
                                ipos[m] = c;
                                let mut idx = oidx.clone();
                                idx[m] = c;
                                let off = cg.offset(&idx, shape);
                                let v = at(0, Ix::Multi(&ipos)).into_float_value();
                                let a = cg.load(k.out, off, odt).into_float_value();
                                cg.store(k.out, off, cg.combine(*kind, a, v).into(), odt);
                            });
                        });
                    });
                });
            }
            Op::ReduceWindow { kind, window } => {
                let x = opnd(0).dims.clone();
                let acc = self.slot(k.f, self.ctx.f32_type().into());
                self.loop_nest_physical(shape, &mut |cg, oidx| {
                    cg.b.build_store(acc, cg.identity(*kind)).unwrap();
                    cg.loop_nest(&window.size, &mut |cg, tidx| {
                        let mut valid = cg.ctx.bool_type().const_int(1, false);
                        let mut pos = Vec::with_capacity(x.len());
                        for d in 0..x.len() {
                            let p = cg.window_pos(oidx[d], tidx[d], window, d);
                            valid = cg.b.build_and(valid, cg.in_range(p, x[d]), "").unwrap();
                            pos.push(cg.clamp_index(p, x[d]));
                        }
                        let v = at(0, Ix::Multi(&pos)).into_float_value();
                        let a = cg.b.build_load(acc, "").unwrap().into_float_value();
                        let nv = cg.select(valid, cg.combine(*kind, a, v).into(), a.into());
                        cg.b.build_store(acc, nv).unwrap();
                    });
                    let a = cg.b.build_load(acc, "").unwrap();
                    cg.store(k.out, cg.offset(oidx, shape), a, odt);
                });
            }
            Op::Dot(d) if self.grid => self.dot_element(k, d, shape, opnds, bufs),
            Op::Convolution {
                window,
                feature_group_count,
            } if self.grid => {
                self.conv_element(k, window, *feature_group_count, shape, opnds, bufs)
            }
            Op::Dot(d)
                if gemm::geometry(d, opnd(0), opnd(1), shape)
                    .is_some_and(|g| self.packed_rhs.get() || g.b_n_unit) =>
            {
                let g = gemm::geometry(d, opnd(0), opnd(1), shape).unwrap();
                let index = |p: PointerValue<'ctx>| k.args.iter().position(|&a| a == p).unwrap();
                let lfree = opnd(0).rank() - d.lhs_batch.len() - d.lhs_contracting.len();
                let epi = self
                    .reg_epi
                    .borrow()
                    .clone()
                    .and_then(|e| gemm::dim_roles(&g, shape, lfree).map(|r| (e, r)));
                self.epi_applied.set(epi.is_some());
                self.gemm(
                    k,
                    &g,
                    (index(bufs[0]), index(bufs[1])),
                    self.packed_rhs.get(),
                    epi,
                );
            }
            Op::Dot(d) => {
                let (l, r) = (opnd(0).dims.clone(), opnd(1).dims.clone());
                let lfree: Vec<usize> = (0..l.len())
                    .filter(|i| !d.lhs_batch.contains(i) && !d.lhs_contracting.contains(i))
                    .collect();
                let rfree: Vec<usize> = (0..r.len())
                    .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
                    .collect();
                let nb = d.lhs_batch.len();
                self.zero(k, shape.element_count());
                // Loop order: batch, lhs free, contracting, rhs free (innermost, contiguous in out).
                let mut outer: Vec<usize> = d.lhs_batch.iter().map(|&i| l[i]).collect();
                outer.extend(lfree.iter().map(|&i| l[i]));
                outer.extend(d.lhs_contracting.iter().map(|&i| l[i]));
                let inner: Vec<usize> = rfree.iter().map(|&i| r[i]).collect();
                let nlf = lfree.len();
                let nc = d.lhs_contracting.len();
                self.loop_nest(&outer, &mut |cg, o| {
                    let mut li = vec![cg.i64(0); l.len()];
                    let mut ri_base = vec![cg.i64(0); r.len()];
                    for k2 in 0..nb {
                        li[d.lhs_batch[k2]] = o[k2];
                        ri_base[d.rhs_batch[k2]] = o[k2];
                    }
                    for (k2, &a) in lfree.iter().enumerate() {
                        li[a] = o[nb + k2];
                    }
                    for k2 in 0..nc {
                        li[d.lhs_contracting[k2]] = o[nb + nlf + k2];
                        ri_base[d.rhs_contracting[k2]] = o[nb + nlf + k2];
                    }
                    let lv = cg
                        .load(bufs[0], cg.offset(&li, &opnds[0]), DType::F32)
                        .into_float_value();
                    cg.loop_nest(&inner, &mut |cg, rf| {
                        let mut ri = ri_base.clone();
                        for (k2, &a) in rfree.iter().enumerate() {
                            ri[a] = rf[k2];
                        }
                        let mut oi: Vec<IntValue> = o[..nb + nlf].to_vec();
                        oi.extend_from_slice(rf);
                        let rv = cg
                            .load(bufs[1], cg.offset(&ri, &opnds[1]), DType::F32)
                            .into_float_value();
                        let off = cg.offset(&oi, shape);
                        let acc = cg.load(k.out, off, DType::F32).into_float_value();
                        cg.store(k.out, off, cg.fma(lv, rv, acc).into(), DType::F32);
                    });
                });
            }
            Op::Convolution {
                window,
                feature_group_count,
            } if conv::choose(
                window,
                *feature_group_count,
                opnd(0),
                opnd(1),
                shape,
                self.packed_rhs.get(),
            )
            .is_some() =>
            {
                let path = conv::choose(
                    window,
                    *feature_group_count,
                    opnd(0),
                    opnd(1),
                    shape,
                    self.packed_rhs.get(),
                )
                .unwrap();
                let index = |p: PointerValue<'ctx>| k.args.iter().position(|&a| a == p).unwrap();
                self.conv_fast(
                    k,
                    path,
                    window,
                    (opnd(0), opnd(1), shape),
                    (index(bufs[0]), index(bufs[1])),
                    self.reg_epi.borrow().clone(),
                );
                self.epi_applied.set(self.reg_epi.borrow().is_some());
            }
            Op::Convolution {
                window,
                feature_group_count,
            } if shape.layout.minor_to_major.first() == Some(&1) => {
                self.conv_channels_minor(k, window, *feature_group_count, shape, opnds, bufs);
            }
            Op::Convolution {
                window,
                feature_group_count,
            } => {
                let (x, w) = (opnd(0).dims.clone(), opnd(1).dims.clone());
                let sp = window.rank();
                let cin_g = w[1];
                let cout_g = w[0] / feature_group_count;
                self.zero(k, shape.element_count());
                // Loops: n, o, ci (per group), window taps (outer); output spatial (inner).
                let mut outer = vec![x[0], w[0], cin_g];
                outer.extend(window.size.iter().copied());
                self.loop_nest(&outer, &mut |cg, o| {
                    let (n, oc, ci) = (o[0], o[1], o[2]);
                    let taps = &o[3..];
                    let g =
                        cg.b.build_int_unsigned_div(oc, cg.i64(cout_g as u64), "")
                            .unwrap();
                    let cin =
                        cg.b.build_int_add(
                            cg.b.build_int_mul(g, cg.i64(cin_g as u64), "").unwrap(),
                            ci,
                            "",
                        )
                        .unwrap();
                    let mut wi = vec![oc, ci];
                    wi.extend_from_slice(taps);
                    let wv = cg
                        .load(bufs[1], cg.offset(&wi, &opnds[1]), DType::F32)
                        .into_float_value();
                    // Output positions whose input position is inside the image: affine indices,
                    // no padding checks in the loop body, so the innermost loop vectorizes.
                    let ranges: Vec<_> = (0..sp)
                        .map(|dd| {
                            cg.window_range(
                                taps[dd],
                                window.stride[dd],
                                window.dilation[dd],
                                window.pad_low[dd],
                                x[2 + dd],
                                out_dims[2 + dd],
                            )
                        })
                        .collect();
                    let mut s: Vec<IntValue<'ctx>> = Vec::with_capacity(sp);
                    conv_inner(cg, &ranges, &mut s, &|cg, s| {
                        let mut xi = vec![n, cin];
                        for dd in 0..sp {
                            xi.push(cg.window_pos(s[dd], taps[dd], window, dd));
                        }
                        let xv = cg
                            .load(bufs[0], cg.offset(&xi, &opnds[0]), DType::F32)
                            .into_float_value();
                        let mut oi = vec![n, oc];
                        oi.extend_from_slice(s);
                        let off = cg.offset(&oi, shape);
                        let acc = cg.load(k.out, off, DType::F32).into_float_value();
                        cg.store(k.out, off, cg.fma(xv, wv, acc).into(), DType::F32);
                    });
                });
            }
            Op::Argmax { dimension } => {
                let x = opnd(0).dims.clone();
                let dim = *dimension;
                let best_i = self.slot(k.f, self.ctx.i64_type().into());
                let best_v = self.slot(k.f, self.ctx.f32_type().into());
                self.loop_nest_physical(shape, &mut |cg, oidx| {
                    let full_at = |j: IntValue<'ctx>| -> Vec<IntValue<'ctx>> {
                        let mut it = oidx.iter();
                        (0..x.len())
                            .map(|dd| if dd == dim { j } else { *it.next().unwrap() })
                            .collect()
                    };
                    let v0 = at(0, Ix::Multi(&full_at(cg.i64(0))));
                    cg.b.build_store(best_v, v0).unwrap();
                    cg.b.build_store(best_i, cg.i64(0)).unwrap();
                    cg.for_loop(x[dim], &mut |cg, j| {
                        let v = at(0, Ix::Multi(&full_at(j))).into_float_value();
                        let bv = cg.b.build_load(best_v, "").unwrap().into_float_value();
                        let bi = cg.b.build_load(best_i, "").unwrap();
                        // First maximum; a NaN counts as the maximum (numpy).
                        let better =
                            cg.b.build_or(
                                cg.fcmp(FloatPredicate::OGT, v, bv),
                                cg.fcmp(FloatPredicate::UNO, v, v),
                                "",
                            )
                            .unwrap();
                        let best_ok = cg.fcmp(FloatPredicate::ORD, bv, bv);
                        let take = cg.b.build_and(better, best_ok, "").unwrap();
                        cg.b.build_store(best_v, cg.select(take, v.into(), bv.into()))
                            .unwrap();
                        cg.b.build_store(best_i, cg.select(take, j.into(), bi))
                            .unwrap();
                    });
                    let bi = cg.b.build_load(best_i, "").unwrap().into_int_value();
                    let bi32 = cg.b.build_int_truncate(bi, cg.ctx.i32_type(), "").unwrap();
                    cg.store(k.out, cg.offset(oidx, shape), bi32.into(), DType::I32);
                });
            }
            Op::TopK { indices, .. } => self.top_k_kernel(k, *indices, shape, opnds, at),
            Op::Sample => self.sample_kernel(k, shape, opnds, at),
            Op::Parameter { .. } | Op::Constant(_) | Op::Fusion { .. } => {
                unreachable!("no loops of their own for parameters, constants and fusions")
            }
            _ => {
                // Elemental ops: one value per output element.
                self.loop_nest_physical(shape, &mut |cg, idx| {
                    let v = cg.elemental(op, shape, opnds, idx, at);
                    cg.store(k.out, cg.offset(idx, shape), v, odt);
                });
            }
        }
    }

    /// Convolution writing an output whose channels are minor-most (NHWC): for each output pixel
    /// and window tap inside the image, the innermost loop runs over output channels, contiguous
    /// in the output and (with the kernel laid out channels-minor) in the weights.
    fn conv_channels_minor(
        &self,
        k: &Kernel<'ctx>,
        window: &crate::ir::Window,
        groups: usize,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let (xs, ws) = (&opnds[0], &opnds[1]);
        let (x, w) = (&xs.dims, &ws.dims);
        let sp = window.rank();
        let (o_count, cin_g) = (w[0], w[1]);
        let cout_g = o_count / groups;
        self.zero(k, shape.element_count());
        let mut pixel_dims = vec![x[0]];
        pixel_dims.extend_from_slice(&shape.dims[2..]);
        self.loop_nest(&pixel_dims, &mut |cg, px| {
            let n = px[0];
            let opos = &px[1..];
            cg.loop_nest(&window.size, &mut |cg, taps| {
                let mut valid = cg.ctx.bool_type().const_int(1, false);
                let mut ipos = Vec::with_capacity(sp);
                for dd in 0..sp {
                    let p = cg.window_pos(opos[dd], taps[dd], window, dd);
                    valid =
                        cg.b.build_and(valid, cg.in_range(p, x[2 + dd]), "")
                            .unwrap();
                    ipos.push(p);
                }
                cg.if_then(valid, &mut |cg| {
                    cg.for_loop(cin_g, &mut |cg, ci| {
                        cg.for_loop(o_count, &mut |cg, oc| {
                            // Input channel of this output channel's group.
                            let cin = if groups == 1 {
                                ci
                            } else {
                                let g =
                                    cg.b.build_int_unsigned_div(oc, cg.i64(cout_g as u64), "")
                                        .unwrap();
                                cg.b.build_int_add(
                                    cg.b.build_int_mul(g, cg.i64(cin_g as u64), "").unwrap(),
                                    ci,
                                    "",
                                )
                                .unwrap()
                            };
                            let mut xi = vec![n, cin];
                            xi.extend_from_slice(&ipos);
                            let xv = cg
                                .load(bufs[0], cg.offset(&xi, xs), DType::F32)
                                .into_float_value();
                            let mut wi = vec![oc, ci];
                            wi.extend_from_slice(taps);
                            let wv = cg
                                .load(bufs[1], cg.offset(&wi, ws), DType::F32)
                                .into_float_value();
                            let mut oi = vec![n, oc];
                            oi.extend_from_slice(opos);
                            let off = cg.offset(&oi, shape);
                            let acc = cg.load(k.out, off, DType::F32).into_float_value();
                            cg.store(k.out, off, cg.fma(xv, wv, acc).into(), DType::F32);
                        });
                    });
                });
            });
        });
    }

    fn zero(&self, k: &Kernel<'ctx>, n: usize) {
        self.for_loop(n, &mut |cg, i| {
            cg.b.build_store(cg.gep(k.out, i), cg.f32c(0.0)).unwrap();
        });
    }

    /// The value of elemental op `op` (result `shape`, operands `opnds`) at output index `idx`;
    /// operand `j`'s elements come from `at(j, ...)`.
    fn elemental(
        &self,
        op: &Op,
        shape: &Shape,
        opnds: &[Shape],
        idx: &[IntValue<'ctx>],
        at_ix: &dyn Fn(usize, Ix<'_, 'ctx>) -> BasicValueEnum<'ctx>,
    ) -> BasicValueEnum<'ctx> {
        let out_dims = &shape.dims;
        let shape_of = |j: usize| &opnds[j];
        let at = |j: usize, oidx: &[IntValue<'ctx>]| at_ix(j, Ix::Multi(oidx));
        match op {
            Op::Unary(u) => self.unary(*u, at(0, idx).into_float_value()).into(),
            Op::Binary(bop) => self
                .binary(
                    *bop,
                    at(0, idx).into_float_value(),
                    at(1, idx).into_float_value(),
                )
                .into(),
            Op::Compare(dir) => {
                let p = match dir {
                    CompareDir::Eq => FloatPredicate::OEQ,
                    CompareDir::Ne => FloatPredicate::UNE,
                    CompareDir::Lt => FloatPredicate::OLT,
                    CompareDir::Le => FloatPredicate::OLE,
                    CompareDir::Gt => FloatPredicate::OGT,
                    CompareDir::Ge => FloatPredicate::OGE,
                };
                self.fcmp(
                    p,
                    at(0, idx).into_float_value(),
                    at(1, idx).into_float_value(),
                )
                .into()
            }
            Op::Select => self.select(at(0, idx).into_int_value(), at(1, idx), at(2, idx)),
            Op::Convert { to } => self.convert(at(0, idx), shape_of(0).dtype, *to),
            Op::Clamp => {
                let bound = |j: usize| -> FloatValue<'ctx> {
                    if shape_of(j).rank() == 0 {
                        at(j, &[]).into_float_value()
                    } else {
                        at(j, idx).into_float_value()
                    }
                };
                let x = at(1, idx).into_float_value();
                let lo = self.fmax(x, bound(0), true);
                let r = self.fmax(lo, bound(2), false);
                // NaN stays NaN (fmax already propagates it).
                r.into()
            }
            Op::Broadcast { dimensions } => {
                let s = shape_of(0);
                let oi: Vec<IntValue> = dimensions
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| if s.dims[i] == 1 { self.i64(0) } else { idx[d] })
                    .collect();
                at(0, &oi)
            }
            Op::Reshape => {
                // Same row-major offset.
                at_ix(0, Ix::Linear(self.linear(idx, out_dims)))
            }
            Op::Transpose { permutation } => {
                let mut oi = vec![self.i64(0); idx.len()];
                for (i, &p) in permutation.iter().enumerate() {
                    oi[p] = idx[i];
                }
                at(0, &oi)
            }
            Op::Slice {
                starts, strides, ..
            } => {
                let oi: Vec<IntValue> = idx
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let m = self
                            .b
                            .build_int_mul(v, self.i64(strides[i] as u64), "")
                            .unwrap();
                        self.b
                            .build_int_add(m, self.i64(starts[i] as u64), "")
                            .unwrap()
                    })
                    .collect();
                at(0, &oi)
            }
            Op::Pad { low, .. } => {
                let s = shape_of(0);
                let mut valid = self.ctx.bool_type().const_int(1, false);
                let mut oi = Vec::with_capacity(idx.len());
                for (i, &v) in idx.iter().enumerate() {
                    let p = self
                        .b
                        .build_int_sub(v, self.i64(low[i] as u64), "")
                        .unwrap();
                    valid = self
                        .b
                        .build_and(valid, self.in_range(p, s.dims[i]), "")
                        .unwrap();
                    oi.push(self.clamp_index(p, s.dims[i]));
                }
                let x = at(0, &oi);
                let pad = at(1, &[]);
                self.select(valid, x, pad)
            }
            Op::Concatenate { dimension } => {
                let d = *dimension;
                let mut start = 0usize;
                let mut result: Option<BasicValueEnum> = None;
                for j in 0..opnds.len() {
                    let s = shape_of(j);
                    let p = self
                        .b
                        .build_int_sub(idx[d], self.i64(start as u64), "")
                        .unwrap();
                    let mut oi = idx.to_vec();
                    oi[d] = self.clamp_index(p, s.dims[d]);
                    let v = at(j, &oi);
                    result = Some(match result {
                        None => v,
                        Some(prev) => {
                            let here = self
                                .b
                                .build_int_compare(IntPredicate::SGE, p, self.i64(0), "")
                                .unwrap();
                            self.select(here, v, prev)
                        }
                    });
                    start += s.dims[d];
                }
                result.expect("concatenate has operands")
            }
            Op::Gather => {
                let table = shape_of(0).dims.clone();
                let ids = shape_of(1).dims.clone();
                let r = ids.len();
                let _ = &ids;
                let row = at(1, &idx[..r]).into_int_value();
                let row = self
                    .b
                    .build_int_s_extend(row, self.ctx.i64_type(), "")
                    .unwrap();
                let row = self.clamp_index(row, table[0]);
                let mut ti = vec![row];
                ti.extend_from_slice(&idx[r..]);
                at(0, &ti)
            }
            other => unreachable!("{} is not elemental", other.opcode()),
        }
    }
}

/// Nested run-time-bounded loops over the output spatial dims of a convolution.
fn conv_inner<'a, 'ctx>(
    cg: &Cg<'a, 'ctx>,
    ranges: &[(IntValue<'ctx>, IntValue<'ctx>)],
    s: &mut Vec<IntValue<'ctx>>,
    body: &dyn Fn(&Cg<'a, 'ctx>, &[IntValue<'ctx>]),
) {
    if s.len() == ranges.len() {
        body(cg, s);
        return;
    }
    let (lo, hi) = ranges[s.len()];
    cg.for_range(lo, hi, &mut |cg, i| {
        s.push(i);
        conv_inner(cg, ranges, s, body);
        s.pop();
    });
}

/// The bytes of a row-major literal of shape `s` rearranged into `s`'s layout.
pub(crate) fn relayout(bytes: &[u8], s: &Shape) -> Vec<u8> {
    if is_row_major(s) {
        return bytes.to_vec();
    }
    let w = s.dtype.size_bytes();
    let phys = physical_strides(s);
    let logical = row_major_strides(&s.dims);
    let n = s.element_count();
    let mut out = vec![0u8; bytes.len()];
    for i in 0..n {
        let mut rest = i as u64;
        let mut p = 0u64;
        for d in 0..s.rank() {
            let q = rest / logical[d];
            rest %= logical[d];
            p += q * phys[d];
        }
        let (src, dst) = (i * w, p as usize * w);
        out[dst..dst + w].copy_from_slice(&bytes[src..src + w]);
    }
    out
}
