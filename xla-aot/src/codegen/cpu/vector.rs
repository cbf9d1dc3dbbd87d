//! Vector registers for the micro-kernels: a column chunk's vectors ([`VecCol`], [`vectors`])
//! and the vector loads, stores, splats, FMAs and bfloat16 roundings of `gemm.rs`,
//! `gemm_bf16.rs`, `conv.rs`, `reduce.rs` and the register epilogues (`epilogue.rs`).
//!
//! Contract: vector accesses are element-aligned (alignment 4), never wider than the buffer:
//! a partial vector is stored lane by lane ([`Cg::store_lanes`]) unless the caller knows a whole
//! vector is always there (packed panels are zero-padded to a whole panel).

use super::Cg;
use crate::ir::DType;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{BasicValue, FunctionValue, IntValue, PointerValue, VectorValue};

/// The innermost cache a prefetch fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Locality {
    /// Every level, L1 included (data needed within the next few hundred cycles).
    L1,
    /// The L2 and beyond, not the L1 (data needed after the L1's current contents).
    L2,
}

/// One vector of a column chunk: its first column (relative to the chunk), its lanes, and how
/// many of them are real output columns.
#[derive(Clone, Copy)]
pub(super) struct VecCol {
    pub(super) col: usize,
    pub(super) lanes: u32,
    pub(super) store: u32,
}

/// Narrowest vector a tail is cut into before single lanes: 4 lanes is SSE's and NEON's register
/// (and a quarter of AVX-512's), the smallest width every target loads and stores in one
/// instruction.
const MIN_TAIL_LANES: usize = 4;

/// The vectors covering `cols` columns: whole vectors, then (unless a whole vector is always
/// readable, `whole`) the rest in halving power-of-two vectors down to [`MIN_TAIL_LANES`] and
/// single lanes below that (24 channels on AVX-512: 16 + 8, not 16 + 8 × 1).
pub(super) fn vectors(cols: usize, lanes: u32, whole: bool) -> Vec<VecCol> {
    let lanes = lanes as usize;
    let mut v = Vec::new();
    let mut c = 0;
    while c < cols {
        let width = if c + lanes <= cols || whole {
            lanes
        } else {
            let rest = cols - c;
            let pow2 = 1 << rest.ilog2();
            if pow2 >= MIN_TAIL_LANES { pow2 } else { 1 }
        };
        v.push(VecCol {
            col: c,
            lanes: width as u32,
            store: width.min(cols - c) as u32,
        });
        c += width;
    }
    v
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    pub(super) fn vec_ty(&self, lanes: u32) -> VectorType<'ctx> {
        self.ctx.f32_type().vec_type(lanes)
    }

    pub(super) fn vec_fmuladd(&self, lanes: u32) -> FunctionValue<'ctx> {
        inkwell::intrinsics::Intrinsic::find("llvm.fmuladd")
            .expect("llvm.fmuladd exists")
            .get_declaration(self.m, &[self.vec_ty(lanes).into()])
            .expect("vector fmuladd")
    }

    /// A `lanes`-wide load at `p + off` (element-aligned). Through an `i16*` (a half weight,
    /// `Cpu::half_rhs`) it loads `lanes` halves and widens them to f32; through an `i8*` (an int8
    /// weight) it loads `lanes` int8 values as f32, not yet scaled.
    pub(super) fn vload(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        match p.get_type().get_element_type() {
            inkwell::types::AnyTypeEnum::IntType(t) if t.get_bit_width() == 8 => {
                return self.vload_i8(p, off, lanes);
            }
            inkwell::types::AnyTypeEnum::IntType(_) => return self.vload_half(p, off, lanes),
            _ => {}
        }
        self.load_vector(p, off, self.vec_ty(lanes), 4)
    }

    /// A vector of type `ty` loaded from element `off` of `p` (whatever `p` points to), with
    /// alignment `align`: one element's, as every vector access here is element-aligned.
    pub(super) fn load_vector(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        ty: VectorType<'ctx>,
        align: u32,
    ) -> VectorValue<'ctx> {
        let vp = self
            .b
            .build_pointer_cast(self.gep(p, off), ty.ptr_type(AddressSpace::default()), "")
            .unwrap();
        let v = self.b.build_load(vp, "").unwrap();
        v.as_instruction_value()
            .unwrap()
            .set_alignment(align)
            .unwrap();
        v.into_vector_value()
    }

    /// The scales of padded columns `col..col + lanes` of int8 panels `p` (an `i8*`) holding
    /// `values` int8 values, stored after them one f32 each (`core/packing.rs`
    /// `write_int8_panels`): multiplying a column's int8 values by its scale gives the weight.
    pub(super) fn column_scales(
        &self,
        p: PointerValue<'ctx>,
        values: usize,
        col: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let at = self.add(self.i64(values as u64), self.mul(col, 4));
        let fp = self
            .b
            .build_pointer_cast(
                self.gep(p, at),
                self.ctx.f32_type().ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        self.vload(fp, self.i64(0), lanes)
    }

    /// `lanes` int8 values at `p + off` (`p` an `i8*`) converted to f32 (exact); the caller applies
    /// the columns' scales (`gemm.rs`, int8 panels).
    fn vload_i8(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let q = self.load_vector(p, off, self.ctx.i8_type().vec_type(lanes), 1);
        let w = self
            .b
            .build_int_s_extend(q, self.ctx.i32_type().vec_type(lanes), "")
            .unwrap();
        self.b
            .build_signed_int_to_float(w, self.vec_ty(lanes), "")
            .unwrap()
    }

    /// `lanes` halves at `p + off` (`p` an `i16*`) widened to f32: bfloat16 by a shift into the
    /// high half of each lane; IEEE half with `fpext` where the target converts in hardware
    /// (`Target::has_f16_convert`), else with integer operations (exact for every half).
    fn vload_half(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let i32v = self.ctx.i32_type().vec_type(lanes);
        let h = self.load_vector(p, off, self.ctx.i16_type().vec_type(lanes), 2);
        let splat = |v: u64| {
            let c = self.ctx.i32_type().const_int(v, false);
            VectorType::const_vector(&vec![c; lanes as usize])
        };
        let b = &self.b;
        let bits = match self.be.half_rhs.get() {
            Some(DType::F16) if self.target.has_f16_convert() => {
                let hv = b
                    .build_bit_cast(h, self.ctx.f16_type().vec_type(lanes), "")
                    .unwrap()
                    .into_vector_value();
                return b.build_float_ext(hv, self.vec_ty(lanes), "").unwrap();
            }
            Some(DType::F16) => {
                // sign | (exponent + 112) << 23 | mantissa << 13 for normal halves; subnormals are
                // their integer mantissa times 2^-24 (exact in f32); weights are finite.
                let w = b.build_int_z_extend(h, i32v, "").unwrap();
                let sign = b.build_and(w, splat(0x8000), "").unwrap();
                let sign = b.build_left_shift(sign, splat(16), "").unwrap();
                let em = b.build_and(w, splat(0x7fff), "").unwrap();
                let shifted = b.build_left_shift(em, splat(13), "").unwrap();
                let normal = b.build_int_add(shifted, splat(0x3800_0000), "").unwrap();
                let sub = b
                    .build_unsigned_int_to_float(em, self.vec_ty(lanes), "")
                    .unwrap();
                let scale = self.f32c(2f64.powi(-24));
                let sub = b
                    .build_float_mul(sub, self.splat(scale, lanes), "")
                    .unwrap();
                let sub = b.build_bit_cast(sub, i32v, "").unwrap().into_vector_value();
                let is_sub = b
                    .build_int_compare(IntPredicate::ULT, em, splat(0x400), "")
                    .unwrap();
                let v = b
                    .build_select(is_sub, sub, normal, "")
                    .unwrap()
                    .into_vector_value();
                b.build_or(v, sign, "").unwrap()
            }
            _ => {
                let w = b.build_int_z_extend(h, i32v, "").unwrap();
                b.build_left_shift(w, splat(16), "").unwrap()
            }
        };
        b.build_bit_cast(bits, self.vec_ty(lanes), "")
            .unwrap()
            .into_vector_value()
    }

    /// `x` (f32 lanes) rounded to bfloat16 and widened back: `round-bf16` on a vector, the same
    /// bits as `core/elemental.rs`' scalar code. On AVX-512 BF16, 16 lanes take `vcvtneps2bf16`
    /// ([`Cg::cvt_bf16`]) and a shift back.
    pub(super) fn vround_bf16(&self, x: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let n = x.get_type().get_size();
        let r = match self.cvt_bf16(x) {
            Some(h) => {
                let i32v = self.ctx.i32_type().vec_type(n);
                let w = self.b.build_int_z_extend(h, i32v, "").unwrap();
                let c = self.ctx.i32_type().const_int(16, false);
                let sh = VectorType::const_vector(&vec![c; n as usize]);
                self.b.build_left_shift(w, sh, "").unwrap()
            }
            None => self.round_bf16_bits(x),
        };
        self.b
            .build_bit_cast(r, x.get_type(), "")
            .unwrap()
            .into_vector_value()
    }

    /// `x` (f32 lanes) rounded to IEEE half and widened back: `round-f16` on a vector, the same
    /// bits as `core/elemental.rs`' scalar code. Where the target converts halves in hardware
    /// (`Target::has_f16_convert`: aarch64 `fcvtn`/`fcvtl`, x86-64 F16C) an `fptrunc` and an
    /// `fpext`, which round to nearest even as `ir/half.rs` does; elsewhere integer code.
    pub(super) fn vround_f16(&self, x: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let n = x.get_type().get_size();
        let b = &self.b;
        if self.target.has_f16_convert() {
            let h = b
                .build_float_trunc(x, self.ctx.f16_type().vec_type(n), "")
                .unwrap();
            return b.build_float_ext(h, x.get_type(), "").unwrap();
        }
        self.round_f16_exact(x)
    }

    /// `vcvtneps2bf16` (`llvm.x86.avx512bf16.cvtneps2bf16.512`) of 16 f32 lanes, on a target with
    /// AVX-512 BF16: nearest even, NaN made quiet, as `ir/half.rs`, except that it flushes f32
    /// subnormals (|x| < 2⁻¹²⁶) to zero, as `vdpbf16ps` treats bfloat16 subnormals (a difference
    /// of at most 2⁻¹²⁶ per value). `None` elsewhere.
    pub(super) fn cvt_bf16(&self, x: VectorValue<'ctx>) -> Option<VectorValue<'ctx>> {
        if !self.target.has_avx512_bf16() || x.get_type().get_size() != 16 {
            return None;
        }
        const NAME: &str = "llvm.x86.avx512bf16.cvtneps2bf16.512";
        let f = self.m.get_function(NAME).unwrap_or_else(|| {
            let ty = self
                .ctx
                .i16_type()
                .vec_type(16)
                .fn_type(&[self.vec_ty(16).into()], false);
            self.m.add_function(NAME, ty, None)
        });
        Some(self.call(f, &[x.into()]).into_vector_value())
    }

    /// A read prefetch of the line holding element `p + off` into every cache level. The
    /// address may lie past the buffer (a prefetch never faults), so it is not an inbounds GEP.
    pub(super) fn prefetch(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>) {
        self.prefetch_to(p, off, Locality::L1);
    }

    /// Prefetches the line at `p + off` (elements of `p`'s type) into the cache `to`.
    pub(super) fn prefetch_to(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>, to: Locality) {
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i32t = self.ctx.i32_type();
        let pf = self
            .m
            .get_function("llvm.prefetch.p0i8")
            .unwrap_or_else(|| {
                let ty = self
                    .ctx
                    .void_type()
                    .fn_type(&[i8p.into(), i32t.into(), i32t.into(), i32t.into()], false);
                self.m.add_function("llvm.prefetch.p0i8", ty, None)
            });
        // SAFETY: only the address is computed; prefetching it has no effect on memory.
        let q = unsafe { self.b.build_gep(p, &[off], "").unwrap() };
        let q = self.b.build_pointer_cast(q, i8p, "").unwrap();
        let c = |v: u64| i32t.const_int(v, false);
        // read, the locality (3: every level, `prefetcht0`; 2: L2 and out, `prefetcht1`), data.
        let locality = match to {
            Locality::L1 => 3,
            Locality::L2 => 2,
        };
        self.b
            .build_call(
                pf,
                &[q.into(), c(0).into(), c(locality).into(), c(1).into()],
                "",
            )
            .unwrap();
    }

    pub(super) fn vstore(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>, v: VectorValue<'ctx>) {
        self.vstore_aligned(p, off, v, 4);
    }

    /// `v` stored at element `off` of `p` (whatever `p` points to), aligned to `align` bytes.
    pub(super) fn vstore_aligned(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        v: VectorValue<'ctx>,
        align: u32,
    ) {
        let vp = self
            .b
            .build_pointer_cast(
                self.gep(p, off),
                v.get_type().ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        let st = self.b.build_store(vp, v).unwrap();
        st.set_alignment(align).unwrap();
    }

    pub(super) fn splat(
        &self,
        x: inkwell::values::FloatValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let undef = self.vec_ty(lanes).get_undef();
        let v = self
            .b
            .build_insert_element(undef, x, self.ctx.i32_type().const_zero(), "")
            .unwrap();
        let mask = self.ctx.i32_type().vec_type(lanes).const_zero();
        self.b.build_shuffle_vector(v, undef, mask, "").unwrap()
    }

    pub(super) fn umin(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> IntValue<'ctx> {
        let lt = self
            .b
            .build_int_compare(IntPredicate::ULT, a, b, "")
            .unwrap();
        self.b.build_select(lt, a, b, "").unwrap().into_int_value()
    }

    pub(super) fn umax(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> IntValue<'ctx> {
        let gt = self
            .b
            .build_int_compare(IntPredicate::UGT, a, b, "")
            .unwrap();
        self.b.build_select(gt, a, b, "").unwrap().into_int_value()
    }

    /// Stores the first `n` lanes of `x` at `p + off`.
    pub(super) fn store_lanes(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        x: VectorValue<'ctx>,
        n: u32,
    ) {
        if n == x.get_type().get_size() {
            self.vstore(p, off, x);
            return;
        }
        for l in 0..n {
            let e = self
                .b
                .build_extract_element(x, self.ctx.i32_type().const_int(l as u64, false), "")
                .unwrap();
            self.store(p, self.add(off, self.i64(l as u64)), e, DType::F32);
        }
    }

    /// [`Self::store_lanes`] with lane `l` at `off + l·stride` (scalar stores unless `stride` is 1).
    pub(super) fn store_lanes_strided(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        x: VectorValue<'ctx>,
        n: u32,
        stride: u64,
    ) {
        if stride == 1 {
            return self.store_lanes(p, off, x, n);
        }
        for l in 0..n {
            let e = self
                .b
                .build_extract_element(x, self.ctx.i32_type().const_int(l as u64, false), "")
                .unwrap();
            self.store(p, self.add(off, self.i64(l as u64 * stride)), e, DType::F32);
        }
    }

    /// The transpose of a square of vectors (`rows.len()` equal to their lanes, a power of
    /// two): lane `j` of row `i` becomes lane `i` of row `j`. Each stage swaps the off-diagonal
    /// `s`×`s` blocks of every aligned `2s`×`2s` block, `s` from half the size down to 1:
    /// `n·log2(n)` two-input shuffles.
    pub(super) fn transpose_square(
        &self,
        mut rows: Vec<VectorValue<'ctx>>,
    ) -> Vec<VectorValue<'ctx>> {
        let n = rows.len();
        debug_assert!(
            n.is_power_of_two() && rows.iter().all(|r| r.get_type().get_size() as usize == n)
        );
        let i32t = self.ctx.i32_type();
        let mask = |f: &dyn Fn(usize) -> usize| {
            VectorType::const_vector(
                &(0..n)
                    .map(|j| i32t.const_int(f(j) as u64, false))
                    .collect::<Vec<_>>(),
            )
        };
        let mut s = n / 2;
        while s >= 1 {
            let top = mask(&|j| if j % (2 * s) < s { j } else { n + j - s });
            let bot = mask(&|j| if j % (2 * s) < s { j + s } else { n + j });
            for i in (0..n).filter(|i| (i / s) % 2 == 0) {
                let (a, b) = (rows[i], rows[i + s]);
                rows[i] = self.b.build_shuffle_vector(a, b, top, "").unwrap();
                rows[i + s] = self.b.build_shuffle_vector(a, b, bot, "").unwrap();
            }
            s /= 2;
        }
        rows
    }
}
