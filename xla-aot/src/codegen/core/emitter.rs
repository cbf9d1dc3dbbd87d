//! The emitter every backend drives: one LLVM module's builder and the model it lowers, with
//! the types, constants, memory accesses, loops and scalar helpers all kernels are made of.
//!
//! Contract: an [`Emitter`] holds what any backend needs (context, module, builder, the HLO and
//! its buffer plan, the target, the intrinsics declared once per module) and its backend's own
//! state `be`; it holds no flag saying which backend it serves. Where shared code must behave
//! per backend, it asks the backend through [`Backend`]: which output elements one invocation of
//! a kernel computes (all of them in memory order on a CPU, one per GPU thread), how a kernel is
//! built and how the host entry points invoke it. Backends add their own methods to
//! `Emitter<'_, '_, TheirState>` in their own modules (`cpu/`, `gpu/`); closures passed to the
//! loops here receive that same type, so a loop body can call them.

use super::CodegenError;
use super::concat_runs::{ConcatRuns, Pin};
use super::layout::{is_row_major, physical_strides, row_major_strides};
use super::math;
use super::outer_split::SplitState;
use super::target::target_attrs;
use crate::arena::{ARENA_ALIGN, BufferPlan};
use crate::ir::{DType, InstId, Module as Hlo, Shape};
use crate::target::Target;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue,
};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};
use std::cell::RefCell;

/// What shared code asks of the backend it runs for: the strategy that replaces mode flags.
pub trait Backend<'ctx>: Sized {
    /// Visits the elements of `shape` (the output of the kernel being generated) that one
    /// invocation of that kernel computes, giving `body` each logical index.
    fn elements<'a>(
        cg: &Emitter<'a, 'ctx, Self>,
        shape: &Shape,
        body: &mut dyn FnMut(&Emitter<'a, 'ctx, Self>, &[IntValue<'ctx>]),
    );

    /// Generates the kernel function `name` computing entry instruction `id`.
    fn kernel<'a>(
        cg: &Emitter<'a, 'ctx, Self>,
        name: &str,
        id: InstId,
    ) -> Result<FunctionValue<'ctx>, CodegenError>;

    /// Generates the kernel `name` copying `n` elements of dtype `d` (an output that is another
    /// output's or an input's value).
    fn copy_kernel<'a>(
        cg: &Emitter<'a, 'ctx, Self>,
        name: &str,
        d: DType,
        n: usize,
    ) -> FunctionValue<'ctx>;

    /// The invocations of the kernel just generated, given its output element count.
    /// Whether the kernel of entry instruction `id` takes the plan's kernel scratch
    /// (`BufferPlan::scratch`) as a last argument after its operands.
    fn takes_scratch<'a>(_cg: &Emitter<'a, 'ctx, Self>, _id: InstId) -> bool {
        false
    }

    fn invocations<'a>(cg: &Emitter<'a, 'ctx, Self>, elements: usize) -> usize {
        let _ = cg;
        elements
    }

    /// Emits, in a host entry point, the invocations of kernel `f` with arguments `args`.
    fn invoke<'a>(
        cg: &Emitter<'a, 'ctx, Self>,
        f: FunctionValue<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
        invocations: usize,
    );
}

/// How a backend declares its kernel functions.
#[derive(Debug, Clone, Copy)]
pub struct KernelAbi {
    /// A trailing `i64` parameter: the invocation's index in the grid.
    pub index_param: bool,
    pub linkage: Linkage,
    /// Kernels stay functions after O3: a kernel boundary shows up in profiles and dumps, and a
    /// call per kernel per run costs nothing next to its loops.
    pub noinline: bool,
}

/// Code generation state for one module: what every backend shares, and the backend's state.
pub struct Emitter<'a, 'ctx, B> {
    pub(crate) ctx: &'ctx Context,
    pub(crate) m: &'a Module<'ctx>,
    pub(crate) b: Builder<'ctx>,
    pub(crate) hlo: &'a Hlo,
    pub(crate) plan: &'a BufferPlan,
    pub(crate) target: &'a Target,
    pub(crate) fmuladd: FunctionValue<'ctx>,
    pub(crate) sqrt: FunctionValue<'ctx>,
    pub(crate) fabs: FunctionValue<'ctx>,
    /// The concatenations the innermost loop being generated reads from one known operand
    /// (`concat_runs.rs`); empty outside such a loop.
    pub(crate) concat_pins: RefCell<Vec<Pin>>,
    /// Whether the body being generated splits its outermost loop between tasks
    /// (`outer_split.rs`).
    pub(crate) outer_split: SplitState<'ctx>,
    /// With `--weights external`: where each constant sits in the caller's blob
    /// (`weights_blob.rs`), set by `constant_globals`.
    pub(crate) blob: RefCell<Option<super::weights_blob::BlobLayout>>,
    /// Per operand of the kernel being generated: its value when it is a scalar f32 constant.
    /// Fused expressions and register epilogues use the number instead of loading it (the same
    /// value, so the same results), which lets LLVM fold it: a clamp against a number is one
    /// compare, a rounding constant's add and subtract fold into the schedule. Empty when the
    /// backend does not set it (every operand is then loaded).
    pub(crate) scalar_consts: RefCell<Vec<Option<f32>>>,
    /// Per argument of the kernel being generated: the byte type it is stored in
    /// (`cpu/byte_storage.rs`), which elemental code reads widened to f32 (exact: the values
    /// are integers of that type). Empty when the backend stores none.
    pub(crate) arg_bytes: RefCell<Vec<Option<DType>>>,
    /// The value ranges (`ir/value_range.rs`) of the fused computation of the kernel being
    /// generated, keyed by that computation's address; `None` when not known. Elemental code and
    /// register epilogues read them to drop work the ranges make exact (an integer round trip of
    /// an integer).
    pub(crate) fused_ranges: RefCell<Option<(usize, Vec<crate::ir::value_range::Range>)>>,
    /// The entry's value ranges, computed on first use.
    pub(crate) entry_ranges: std::cell::OnceCell<Vec<crate::ir::value_range::Range>>,
    /// The backend's state (`cpu::Cpu`, `gpu::Gpu`).
    pub(crate) be: B,
}

/// An element position: a multi-index, or a row-major offset (what a reshape passes on).
#[derive(Clone, Copy)]
pub enum Ix<'a, 'ctx> {
    Multi(&'a [IntValue<'ctx>]),
    Linear(IntValue<'ctx>),
}

/// A kernel being generated: its function and the pointer of each buffer it touches.
pub struct Kernel<'ctx> {
    pub f: FunctionValue<'ctx>,
    pub out: PointerValue<'ctx>,
    pub args: Vec<PointerValue<'ctx>>,
    /// Whether each buffer (the output first, then the arguments) is `noalias`.
    pub noalias: Vec<bool>,
}

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    pub(crate) fn new(
        ctx: &'ctx Context,
        m: &'a Module<'ctx>,
        hlo: &'a Hlo,
        plan: &'a BufferPlan,
        target: &'a Target,
        be: B,
    ) -> Self {
        Emitter {
            ctx,
            m,
            b: ctx.create_builder(),
            hlo,
            plan,
            target,
            fmuladd: math::fmuladd(ctx, m),
            sqrt: math::sqrt(ctx, m),
            fabs: math::fabs(ctx, m),
            concat_pins: RefCell::new(Vec::new()),
            outer_split: SplitState::new(),
            blob: RefCell::new(None),
            scalar_consts: RefCell::new(Vec::new()),
            arg_bytes: RefCell::new(Vec::new()),
            fused_ranges: RefCell::new(None),
            entry_ranges: std::cell::OnceCell::new(),
            be,
        }
    }

    /// Sets [`Emitter::fused_ranges`] for the kernel of entry instruction `id`: its fused
    /// computation's ranges, from the entry ranges of its operands; cleared for another op.
    pub(crate) fn set_fused_ranges(&self, id: InstId) {
        let inst = self.hlo.entry.inst(id);
        let ranges = match &inst.op {
            crate::ir::Op::Fusion { computation, .. } => {
                let entry = self
                    .entry_ranges
                    .get_or_init(|| crate::ir::value_range::ranges(self.hlo));
                let params: Vec<_> = inst.operands.iter().map(|o| entry[o.index()]).collect();
                let key = &**computation as *const crate::ir::Computation as usize;
                Some((
                    key,
                    crate::ir::value_range::computation(computation, &params),
                ))
            }
            _ => None,
        };
        *self.fused_ranges.borrow_mut() = ranges;
    }

    /// Whether the range of instruction `x` of the kernel's fused computation (`comp`, or the
    /// one being generated when `None`) is known and satisfies `p`.
    fn fused_range_is(
        &self,
        comp: Option<&crate::ir::Computation>,
        x: InstId,
        p: impl Fn(&crate::ir::value_range::Range) -> bool,
    ) -> bool {
        self.fused_ranges.borrow().as_ref().is_some_and(|(key, r)| {
            comp.is_none_or(|c| *key == c as *const crate::ir::Computation as usize)
                && r.get(x.index()).is_some_and(&p)
        })
    }

    /// The value range of instruction `x` of the fused computation being generated, if known.
    pub(crate) fn fused_range(&self, x: InstId) -> Option<crate::ir::value_range::Range> {
        let r = self.fused_ranges.borrow();
        r.as_ref().and_then(|(_, r)| r.get(x.index()).copied())
    }

    /// Whether instruction `x` of the kernel's fused computation (`comp`, or the one being
    /// generated when `None`) can never be NaN (`Range::nan` false).
    pub(crate) fn nan_free(&self, comp: Option<&crate::ir::Computation>, x: InstId) -> bool {
        self.fused_range_is(comp, x, |r| !r.nan)
    }

    /// Whether instruction `x` of the kernel's fused computation (`comp`, or the one being
    /// generated when `None`) holds only integers an s32 holds ([`Range::fits_s32`]).
    ///
    /// [`Range::fits_s32`]: crate::ir::value_range::Range::fits_s32
    pub(crate) fn fits_s32(&self, comp: Option<&crate::ir::Computation>, x: InstId) -> bool {
        self.fused_range_is(comp, x, |r| r.fits_s32())
    }

    // ---- types and constants -------------------------------------------------------------------

    pub(crate) fn i64(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v, false)
    }

    pub(crate) fn f32c(&self, v: f64) -> FloatValue<'ctx> {
        self.ctx.f32_type().const_float(v)
    }

    pub(crate) fn elem_type(&self, d: DType) -> BasicTypeEnum<'ctx> {
        match d {
            DType::F32 => self.ctx.f32_type().into(),
            DType::I32 => self.ctx.i32_type().into(),
            // Half weights stored packed (`core/packing.rs`); no other buffer has these types.
            DType::F16 | DType::BF16 => self.ctx.i16_type().into(),
            _ => self.ctx.i8_type().into(), // pred (and reserved dtypes, rejected earlier)
        }
    }

    pub(crate) fn ptr_type(&self, d: DType) -> inkwell::types::PointerType<'ctx> {
        match self.elem_type(d) {
            BasicTypeEnum::FloatType(t) => t.ptr_type(AddressSpace::default()),
            BasicTypeEnum::IntType(t) => t.ptr_type(AddressSpace::default()),
            _ => unreachable!("element types are scalars"),
        }
    }

    pub(crate) fn i8p(&self) -> inkwell::types::PointerType<'ctx> {
        self.ctx.i8_type().ptr_type(AddressSpace::default())
    }

    pub(crate) fn attr(&self, name: &str) -> Attribute {
        self.ctx
            .create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0)
    }

    /// Whether `p` is not aligned to `ARENA_ALIGN` (the C API's arena check).
    pub(crate) fn is_misaligned(&self, p: PointerValue<'ctx>) -> IntValue<'ctx> {
        let addr = self.b.build_ptr_to_int(p, self.ctx.i64_type(), "").unwrap();
        let low = self
            .b
            .build_and(addr, self.i64(ARENA_ALIGN as u64 - 1), "")
            .unwrap();
        self.b
            .build_int_compare(IntPredicate::NE, low, self.i64(0), "")
            .unwrap()
    }

    /// Attributes every generated function carries.
    pub(crate) fn common_attrs(&self, f: FunctionValue<'ctx>) {
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

    /// Declares a kernel `void name(T* noalias out, U* noalias in0, ...)` the way `abi` says,
    /// leaving the builder in its entry block; with `abi.index_param`, its last parameter is
    /// the invocation's index (`Kernel::f`'s parameter after the buffers).
    /// `shared[j]`: operand `j` occupies the output's bytes (in-place reuse, `arena/mod.rs`: it is
    /// read only at the element the kernel writes). Where it has the output's element type, the
    /// kernel reads it through the output pointer (the same address), so LLVM sees one buffer
    /// read and written at the same index and vectorizes without run-time overlap checks, and the
    /// output stays `noalias`; otherwise neither it nor the output is `noalias`.
    pub(crate) fn declare_kernel_with(
        &self,
        abi: KernelAbi,
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
        if abi.index_param {
            tys.push(self.ctx.i64_type().into());
        }
        let f = self.m.add_function(
            name,
            self.ctx.void_type().fn_type(&tys, false),
            Some(abi.linkage),
        );
        self.common_attrs(f);
        if abi.noinline {
            f.add_attribute(AttributeLoc::Function, self.attr("noinline"));
        }
        let mut noalias = Vec::with_capacity(tys.len());
        // Shared operands of the output's type are read through the output pointer.
        let redirected = |j: usize| shared.get(j).copied().unwrap_or(false) && ins[j] == out;
        let any_shared =
            (0..ins.len()).any(|j| shared.get(j).copied().unwrap_or(false) && !redirected(j));
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
        let out = f.get_nth_param(0).unwrap().into_pointer_value();
        Kernel {
            f,
            out,
            args: (1..nbufs as u32)
                .map(|p| {
                    if redirected(p as usize - 1) {
                        out
                    } else {
                        f.get_nth_param(p).unwrap().into_pointer_value()
                    }
                })
                .collect(),
            noalias,
        }
    }

    // ---- memory -----------------------------------------------------------------------------------

    pub(crate) fn gep(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>) -> PointerValue<'ctx> {
        unsafe { self.b.build_in_bounds_gep(p, &[off], "").unwrap() }
    }

    /// Loads element `off` of a buffer of dtype `d`; pred loads give i1.
    pub(crate) fn load(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        d: DType,
    ) -> BasicValueEnum<'ctx> {
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

    pub(crate) fn store(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        v: BasicValueEnum<'ctx>,
        d: DType,
    ) {
        self.outer_split.note_unsplit_code();
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
    pub(crate) fn strided(&self, idx: &[IntValue<'ctx>], strides: &[u64]) -> IntValue<'ctx> {
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
    pub(crate) fn offset(&self, idx: &[IntValue<'ctx>], s: &Shape) -> IntValue<'ctx> {
        self.strided(idx, &physical_strides(s))
    }

    /// Logical row-major offset of `idx` in `dims` (what a reshape preserves).
    pub(crate) fn linear(&self, idx: &[IntValue<'ctx>], dims: &[usize]) -> IntValue<'ctx> {
        self.strided(idx, &row_major_strides(dims))
    }

    // ---- loops --------------------------------------------------------------------------------------

    /// `for i in 0..n { body(i) }`, leaving the builder after the loop.
    pub(crate) fn for_loop(&self, n: usize, body: &mut dyn FnMut(&Self, IntValue<'ctx>)) {
        self.for_range(self.i64(0), self.i64(n as u64), body);
    }

    /// A loop over `0..extent` split into the runs of `runs` (one plain loop when `None`), with
    /// each run's concatenations pinned while its body is generated (`concat_runs.rs`).
    pub(crate) fn for_runs(
        &self,
        extent: usize,
        runs: Option<&ConcatRuns>,
        body: &mut dyn FnMut(&Self, IntValue<'ctx>),
    ) {
        let Some(runs) = runs else {
            self.for_loop(extent, body);
            return;
        };
        for (lo, hi) in runs.runs() {
            *self.concat_pins.borrow_mut() = runs.pins(lo);
            self.for_range(self.i64(lo as u64), self.i64(hi as u64), body);
        }
        self.concat_pins.borrow_mut().clear();
    }

    /// `for i in lo..hi { body(i) }` with bounds known only at run time (possibly empty); every
    /// loop indexes memory, so `lo` is never negative.
    pub(crate) fn for_range(
        &self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        body: &mut dyn FnMut(&Self, IntValue<'ctx>),
    ) {
        self.outer_split.note_unsplit_code();
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let head = self.ctx.append_basic_block(f, "range");
        let exit = self.ctx.append_basic_block(f, "range.end");
        // On a 32-bit target the counter is an i32 (its index values, addresses of that
        // target's memory, fit), widened for the body: an i64 counter took an add with carry, a
        // compare with borrow and a second register in every loop of Thumb code.
        let narrow = self.target.arch == crate::target::Arch::Arm;
        let (lo, hi) = if narrow {
            let i32t = self.ctx.i32_type();
            (
                self.b.build_int_truncate(lo, i32t, "").unwrap(),
                self.b.build_int_truncate(hi, i32t, "").unwrap(),
            )
        } else {
            (lo, hi)
        };
        let pre = self.b.get_insert_block().unwrap();
        let any = self
            .b
            .build_int_compare(IntPredicate::SLT, lo, hi, "")
            .unwrap();
        self.b.build_conditional_branch(any, head, exit).unwrap();
        self.b.position_at_end(head);
        let phi = self.b.build_phi(lo.get_type(), "i").unwrap();
        let counter = phi.as_basic_value().into_int_value();
        let i = if narrow {
            // Never negative (`lo ≥ 0`): zero-extended, LLVM knows the high half is 0 and
            // divides in 32 bits (`__udivdi3` otherwise).
            self.b
                .build_int_z_extend(counter, self.ctx.i64_type(), "")
                .unwrap()
        } else {
            counter
        };
        body(self, i);
        let latch = self.b.get_insert_block().unwrap();
        // No `nsw`: with it LLVM widened the counter back to i64 (and divided it with
        // `__udivdi3`).
        let next = self
            .b
            .build_int_add(counter, lo.get_type().const_int(1, false), "")
            .unwrap();
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
    pub(crate) fn window_range(
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
    pub(crate) fn loop_nest(&self, dims: &[usize], body: &mut dyn FnMut(&Self, &[IntValue<'ctx>])) {
        fn rec<'a, 'ctx, B: Backend<'ctx>>(
            cg: &Emitter<'a, 'ctx, B>,
            dims: &[usize],
            idx: &mut Vec<IntValue<'ctx>>,
            body: &mut dyn FnMut(&Emitter<'a, 'ctx, B>, &[IntValue<'ctx>]),
        ) {
            if idx.len() == dims.len() {
                cg.outer_split.note_unsplit_code();
                body(cg, idx);
                return;
            }
            let n = dims[idx.len()];
            // The outermost loop of a body split between tasks (`outer_split.rs`): levels of
            // extent 1 before it are not looped, the first longer one runs this task's range.
            if n == 1 && cg.outer_split.armed() {
                idx.push(cg.i64(0));
                rec(cg, dims, idx, body);
                idx.pop();
                return;
            }
            if let Some((lo, hi)) = cg.outer_split.range(&cg.b, n) {
                cg.for_range(lo, hi, &mut |cg, i| {
                    idx.push(i);
                    rec(cg, dims, idx, body);
                    idx.pop();
                });
                cg.outer_split.loop_done();
                return;
            }
            cg.for_loop(n, &mut |cg, i| {
                idx.push(i);
                rec(cg, dims, idx, body);
                idx.pop();
            });
        }
        rec(self, dims, &mut Vec::new(), body);
    }

    /// Loops over the elements of `shape` one invocation of the kernel being generated computes
    /// (the backend decides: [`Backend::elements`]); `body` gets the logical index.
    pub(crate) fn loop_nest_physical(
        &self,
        shape: &Shape,
        body: &mut dyn FnMut(&Self, &[IntValue<'ctx>]),
    ) {
        B::elements(self, shape, body)
    }

    /// Loops over every element of `shape` in memory order (major dimension outermost, so the
    /// innermost loop walks the buffer contiguously); `body` gets the logical index.
    pub(crate) fn loop_nest_memory_order(
        &self,
        shape: &Shape,
        body: &mut dyn FnMut(&Self, &[IntValue<'ctx>]),
    ) {
        let order: Vec<usize> = shape.layout.minor_to_major.iter().rev().copied().collect();
        let dims: Vec<usize> = order.iter().map(|&d| shape.dims[d]).collect();
        self.loop_nest(&dims, &mut |cg, phys| {
            let mut idx = phys.to_vec();
            for (k, &d) in order.iter().enumerate() {
                idx[d] = phys[k];
            }
            body(cg, &idx);
        });
    }

    /// Loops over every dimension of `shape` but its minor-most, in memory order; `body` gets
    /// the logical index with the minor-most entry 0, for the caller's own innermost loop.
    pub(crate) fn loop_nest_outer(
        &self,
        shape: &Shape,
        body: &mut dyn FnMut(&Self, &mut Vec<IntValue<'ctx>>),
    ) {
        let m = shape.layout.minor_to_major[0];
        let order: Vec<usize> = shape
            .layout
            .minor_to_major
            .iter()
            .rev()
            .copied()
            .filter(|&d| d != m)
            .collect();
        let dims: Vec<usize> = order.iter().map(|&d| shape.dims[d]).collect();
        self.loop_nest(&dims, &mut |cg, o| {
            let mut idx = vec![cg.i64(0); shape.rank()];
            for (k, &d) in order.iter().enumerate() {
                idx[d] = o[k];
            }
            body(cg, &mut idx);
        });
    }

    /// The grid form: only element `gid` of `shape` (elements in memory order), when it exists.
    pub(crate) fn element_at(
        &self,
        gid: IntValue<'ctx>,
        shape: &Shape,
        body: &mut dyn FnMut(&Self, &[IntValue<'ctx>]),
    ) {
        let order: Vec<usize> = shape.layout.minor_to_major.iter().rev().copied().collect();
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
    }

    /// `if cond { body }`, leaving the builder after it.
    pub(crate) fn if_then(&self, cond: IntValue<'ctx>, body: &mut dyn FnMut(&Self)) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let then = self.ctx.append_basic_block(f, "then");
        let done = self.ctx.append_basic_block(f, "endif");
        self.b.build_conditional_branch(cond, then, done).unwrap();
        self.b.position_at_end(then);
        body(self);
        self.b.build_unconditional_branch(done).unwrap();
        self.b.position_at_end(done);
    }

    /// `if cond { then } else { otherwise }`.
    pub(crate) fn if_else(
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
    pub(crate) fn slot(
        &self,
        f: FunctionValue<'ctx>,
        ty: BasicTypeEnum<'ctx>,
    ) -> PointerValue<'ctx> {
        let entry = f.get_first_basic_block().unwrap();
        let tmp = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => tmp.position_before(&i),
            None => tmp.position_at_end(entry),
        }
        tmp.build_alloca(ty, "acc").unwrap()
    }

    // ---- scalar helpers -----------------------------------------------------------------------------

    pub(crate) fn fcmp(
        &self,
        p: FloatPredicate,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
    ) -> IntValue<'ctx> {
        self.b.build_float_compare(p, a, b, "").unwrap()
    }

    pub(crate) fn select(
        &self,
        c: IntValue<'ctx>,
        a: BasicValueEnum<'ctx>,
        b: BasicValueEnum<'ctx>,
    ) -> BasicValueEnum<'ctx> {
        self.b.build_select(c, a, b, "").unwrap()
    }

    pub(crate) fn call(
        &self,
        f: FunctionValue<'ctx>,
        args: &[BasicValueEnum<'ctx>],
    ) -> BasicValueEnum<'ctx> {
        math::call_value(&self.b, f, args)
    }

    /// max/min that propagate NaN (numpy and XLA semantics).
    pub(crate) fn fmax(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        max: bool,
    ) -> FloatValue<'ctx> {
        // Against a number (not NaN), "a is larger, or a is NaN" is one unordered compare.
        if b.get_constant().is_some_and(|(c, _)| !c.is_nan()) {
            let p = if max {
                FloatPredicate::UGT
            } else {
                FloatPredicate::ULT
            };
            return self
                .select(self.fcmp(p, a, b), a.into(), b.into())
                .into_float_value();
        }
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

    pub(crate) fn fma(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        self.call(self.fmuladd, &[a.into(), b.into(), c.into()])
            .into_float_value()
    }

    /// `a · b + c` rounded once (`fma`, IEEE fusedMultiplyAdd), unlike [`Self::fma`], which
    /// LLVM may split. Targets without the instruction ([`Target::has_fma`]) get it without a
    /// libm call: the f64 product of two f32 is exact; their f64 sum with `c` is rounded to odd
    /// (the exact error of the sum, by Knuth's TwoSum, sets the last bit when it is nonzero and
    /// the bit is clear), and 53 ≥ 24 + 2 bits make rounding that to f32 the correctly rounded
    /// result (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums", 2008).
    pub(crate) fn fma_exact(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        if self.target.has_fma() {
            let fma = math::fma(self.ctx, self.m);
            return self
                .call(fma, &[a.into(), b.into(), c.into()])
                .into_float_value();
        }
        let f32t = self.ctx.f32_type();
        let (b_, f64t, i64t) = (&self.b, self.ctx.f64_type(), self.ctx.i64_type());
        let ext = |x: FloatValue<'ctx>| b_.build_float_ext(x, f64t, "").unwrap();
        let p = b_.build_float_mul(ext(a), ext(b), "").unwrap();
        let c = ext(c);
        let s = b_.build_float_add(p, c, "").unwrap();
        // TwoSum: e = (p − (s − bb)) + (c − bb), bb = s − p, exactly s's rounding error.
        let bb = b_.build_float_sub(s, p, "").unwrap();
        let pa = b_
            .build_float_sub(p, b_.build_float_sub(s, bb, "").unwrap(), "")
            .unwrap();
        let cb = b_.build_float_sub(c, bb, "").unwrap();
        let e = b_.build_float_add(pa, cb, "").unwrap();
        let zero = f64t.const_zero();
        let bits = b_.build_bit_cast(s, i64t, "").unwrap().into_int_value();
        let even = b_
            .build_int_compare(
                IntPredicate::EQ,
                b_.build_and(bits, i64t.const_int(1, false), "").unwrap(),
                i64t.const_zero(),
                "",
            )
            .unwrap();
        // A NaN error (an infinite or NaN sum) is not "inexact": the sum stays as it is.
        let inexact = self.fcmp(FloatPredicate::ONE, e, zero);
        let odd_it = b_.build_and(even, inexact, "").unwrap();
        // One step toward the exact value: away from zero when e has s's sign.
        let away = b_
            .build_xor(
                self.fcmp(FloatPredicate::OGT, e, zero),
                self.fcmp(FloatPredicate::OLT, s, zero),
                "",
            )
            .unwrap();
        let step = self
            .select(
                away,
                i64t.const_int(1, false).into(),
                i64t.const_all_ones().into(),
            )
            .into_int_value();
        let stepped = b_.build_int_add(bits, step, "").unwrap();
        let odd = self
            .select(odd_it, stepped.into(), bits.into())
            .into_int_value();
        let s_odd = b_.build_bit_cast(odd, f64t, "").unwrap().into_float_value();
        b_.build_float_trunc(s_odd, f32t, "").unwrap()
    }

    /// Input position `o·stride + t·dilation - pad_low` along dim `d` of a window.
    pub(crate) fn window_pos(
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
    pub(crate) fn in_range(&self, i: IntValue<'ctx>, hi: usize) -> IntValue<'ctx> {
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
    pub(crate) fn clamp_index(&self, i: IntValue<'ctx>, hi: usize) -> IntValue<'ctx> {
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
        // An empty dim (hi = 0) has no element to load: index 0, whose value the caller's
        // validity test discards.
        self.select(
            big,
            self.i64((hi as u64).saturating_sub(1)).into(),
            i.into(),
        )
        .into_int_value()
    }

    /// Loads element `ix` of a buffer of shape `s`.
    pub(crate) fn load_ix(
        &self,
        p: PointerValue<'ctx>,
        ix: Ix<'_, 'ctx>,
        s: &Shape,
    ) -> BasicValueEnum<'ctx> {
        let off = match ix {
            Ix::Multi(idx) => self.offset(idx, s),
            Ix::Linear(off) if is_row_major(s) => off,
            Ix::Linear(off) => self.offset(&self.unravel(off, &s.dims), s),
        };
        self.load(p, off, s.dtype)
    }

    /// The row-major multi-index of linear offset `off` in `dims`.
    pub(crate) fn unravel(&self, off: IntValue<'ctx>, dims: &[usize]) -> Vec<IntValue<'ctx>> {
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

    /// `x` through an empty inline-assembly statement (no instruction; the value stays in its
    /// register): the same value, opaque to the analyses that would rewrite how it is computed.
    pub(crate) fn opaque(&self, x: IntValue<'ctx>) -> IntValue<'ctx> {
        let t = x.get_type();
        let asm = self.ctx.create_inline_asm(
            t.fn_type(&[t.into()], false),
            String::new(),
            "=r,0".into(),
            false,
            false,
            None,
            false,
        );
        let f = inkwell::values::CallableValue::try_from(asm).expect("inline asm is callable");
        self.b
            .build_call(f, &[x.into()], "")
            .unwrap()
            .try_as_basic_value()
            .basic()
            .expect("the statement gives a value")
            .into_int_value()
    }

    pub(crate) fn add(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> IntValue<'ctx> {
        self.b.build_int_add(a, b, "").unwrap()
    }

    pub(crate) fn mul(&self, a: IntValue<'ctx>, b: u64) -> IntValue<'ctx> {
        self.b.build_int_mul(a, self.i64(b), "").unwrap()
    }
}
