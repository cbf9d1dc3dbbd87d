//! Quantized activations stored one byte per element: a requantized convolution result that
//! only max/min pools read is written as `u8` (or `i8`) and pooled as bytes, so it moves a
//! quarter of its f32 bytes through memory (squeezenet's int8 stem: 3.1 MB of f32 became 0.8 MB
//! that stays in L2).
//!
//! Contract: [`stored_type`] gives the byte type entry instruction `id`'s buffer holds exactly
//! when
//! - `id` is an output fusion whose convolution takes the int8 direct micro-kernel
//!   (`conv/int8.rs`: a weight read as VNNI quads, `conv::choose`'s `PixelsByChannels`, no
//!   Winograd, no channel map) with its whole epilogue in registers and no residual, writing
//!   with its own layout's strides (its channels minor);
//! - its value range (`ir/value_range.rs`) is integers of one byte type ([`Range::byte_type`]),
//!   so the conversion to the byte and back to f32 is exact;
//! - it is not a model output, and every reader is a bare max or min `reduce-window` over it on
//!   the register pooling path ([`pool_fits_registers`]) whose windows all hold an element.
//!
//! The producer converts its finished f32 vectors to the byte type (`cvttps2dq` + `vpmovdb`),
//! the pools load bytes, combine them as integers (`vpmaxub`: the conversion is monotone, so the
//! largest byte is the largest value) and convert the pooled bytes back to f32. The values are
//! those of the f32 kernels bit for bit. Both kernels check that they took these paths.
//!
//! [`Range::byte_type`]: crate::ir::value_range::Range::byte_type

use super::Cg;
use super::conv::{self, ConvPath};
use super::epilogue;
use super::reduce::pool_fits_registers;
use crate::codegen::core::packing::{Packings, Tiles, heavy_in, mapped_conv_input};
use crate::ir::value_range::Range;
use crate::ir::{DType, FusionKind, InstId, Module as Hlo, Op, ReduceKind};
use crate::target::Target;
use inkwell::AddressSpace;
use inkwell::types::VectorType;
use inkwell::values::{IntValue, PointerValue, VectorValue};

/// The byte type the CPU backend stores entry instruction `id` in, if it does (module doc);
/// `ranges`: the entry's value ranges, `readers`: each instruction's readers.
pub fn stored_type(
    hlo: &Hlo,
    target: &Target,
    packings: &Packings,
    (ranges, readers): (&[Range], &[Vec<InstId>]),
    id: InstId,
) -> Option<DType> {
    let c = &hlo.entry;
    let inst = c.inst(id);
    let Op::Fusion {
        kind: FusionKind::Output,
        computation,
    } = &inst.op
    else {
        return None;
    };
    let byte = ranges[id.index()].byte_type()?;
    if c.outputs.iter().any(|o| o.value == id) || readers[id.index()].is_empty() {
        return None;
    }
    let (op, x, w, out) = heavy_in(hlo, id)?;
    let Op::Convolution {
        window,
        feature_group_count,
    } = op
    else {
        return None;
    };
    if packings.reads_vnni(hlo, id).is_none()
        || packings.winograd(hlo, id).is_some()
        || mapped_conv_input(hlo, id).is_some()
        || out.layout.minor_to_major.first() != Some(&1)
    {
        return None;
    }
    let path = conv::choose(
        &window,
        feature_group_count,
        &c.inst(x).shape,
        &c.inst(w).shape,
        &out,
        packings.reads_packed(hlo, id),
    );
    if path != Some(ConvPath::PixelsByChannels) {
        return None;
    }
    let heavy = computation
        .ids()
        .find(|&h| matches!(computation.inst(h).op, Op::Convolution { .. }))?;
    let epi = epilogue::recognize(computation, heavy)?;
    if !epi.full_strides().is_empty() {
        return None;
    }
    let lanes = Tiles::for_target(target).lanes;
    let pooled = |r: &InstId| {
        let ri = c.inst(*r);
        match &ri.op {
            Op::ReduceWindow { kind, window } => {
                *kind != ReduceKind::Add
                    && (0..window.rank()).all(|d| {
                        window.pad_low[d] < window.size[d] && window.pad_high[d] < window.size[d]
                    })
                    && pool_fits_registers(window, &ri.shape, &inst.shape, lanes)
            }
            _ => false,
        }
    };
    readers[id.index()].iter().all(pooled).then_some(byte)
}

/// Vectors packed into one 64-byte store by [`Cg::store_finished_bytes`].
const PACKED_VECTORS: usize = 4;

/// A finished vector of a tile: f32 integers of the byte type, for column `col` at element
/// `off`, of which `lanes` are stored.
pub(super) struct Finished<'ctx> {
    pub off: IntValue<'ctx>,
    pub val: VectorValue<'ctx>,
    pub col: usize,
    pub lanes: u32,
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Stores finished vectors of byte type `d` at `p`: four (two) whole 16-lane vectors of
    /// consecutive columns as one 64-byte (32-byte) store
    /// where the target has AVX-512BW (`vpackssdw` twice, `vpackuswb`/`vpacksswb`, `vpermd`:
    /// four shuffles where four `vpmovdb` take eight, on the port the dot products share), the
    /// rest one by one ([`Cg::store_bytes`]). Exact: the values fit the byte type, so the
    /// saturating packs never saturate.
    pub(super) fn store_finished_bytes(
        &self,
        p: PointerValue<'ctx>,
        vals: &[Finished<'ctx>],
        d: DType,
    ) {
        let whole = |v: &Finished<'ctx>| v.lanes == 16 && v.val.get_type().get_size() == 16;
        let packable = self.target.has_avx512bw()
            && (vals.len() == PACKED_VECTORS || vals.len() == PACKED_VECTORS / 2)
            && vals.iter().all(whole)
            && vals.windows(2).all(|w| w[1].col == w[0].col + 16);
        if !packable {
            for v in vals {
                self.store_bytes(p, v.off, v.val, v.lanes);
            }
            return;
        }
        let i32v = self.ctx.i32_type().vec_type(16);
        let ints: Vec<VectorValue<'ctx>> = vals
            .iter()
            .map(|v| self.b.build_float_to_signed_int(v.val, i32v, "").unwrap())
            .collect();
        let intrinsic = |name: &str, arg: VectorType<'ctx>, ret: VectorType<'ctx>| {
            self.m.get_function(name).unwrap_or_else(|| {
                let ty = ret.fn_type(&[arg.into(), arg.into()], false);
                self.m.add_function(name, ty, None)
            })
        };
        let i16v = self.ctx.i16_type().vec_type(32);
        let i8v = self.ctx.i8_type().vec_type(64);
        let dw = intrinsic("llvm.x86.avx512.packssdw.512", i32v, i16v);
        let wb = intrinsic(
            if d == DType::U8 {
                "llvm.x86.avx512.packuswb.512"
            } else {
                "llvm.x86.avx512.packsswb.512"
            },
            i16v,
            i8v,
        );
        let ab = self.call(dw, &[ints[0].into(), ints[1].into()]);
        let cd = match ints.get(2..4) {
            Some(cd) => self.call(dw, &[cd[0].into(), cd[1].into()]),
            None => ab,
        };
        let bytes = self.call(wb, &[ab, cd]).into_vector_value();
        // Per 128-bit lane L the packs leave dwords [a_L, b_L, c_L, d_L] (4 bytes of each
        // vector; two vectors: [a_L, b_L, a_L, b_L]): dword 4L + v holds vector v's bytes
        // 4L..4L+3, wanted at dword 4v + L.
        let dwords = self
            .b
            .build_bit_cast(bytes, i32v, "")
            .unwrap()
            .into_vector_value();
        let mask: Vec<_> = (0..4 * vals.len() as u64)
            .map(|i| self.ctx.i32_type().const_int(4 * (i % 4) + i / 4, false))
            .collect();
        let ordered = self
            .b
            .build_shuffle_vector(
                dwords,
                i32v.get_undef(),
                VectorType::const_vector(&mask),
                "",
            )
            .unwrap();
        let vp = self
            .b
            .build_pointer_cast(
                self.gep(p, vals[0].off),
                ordered.get_type().ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        let st = self.b.build_store(vp, ordered).unwrap();
        st.set_alignment(1).unwrap();
    }

    /// Stores the first `n` lanes of `x` (f32 integers of the byte type's range) at element
    /// `off` of `p` (an `i8*`) as bytes: converted to i32 (exact) and truncated.
    pub(super) fn store_bytes(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        x: VectorValue<'ctx>,
        n: u32,
    ) {
        let lanes = x.get_type().get_size();
        let i = self
            .b
            .build_float_to_signed_int(x, self.ctx.i32_type().vec_type(lanes), "")
            .unwrap();
        let bytes = self
            .b
            .build_int_truncate(i, self.ctx.i8_type().vec_type(lanes), "")
            .unwrap();
        if n == lanes {
            let vp = self
                .b
                .build_pointer_cast(
                    self.gep(p, off),
                    bytes.get_type().ptr_type(AddressSpace::default()),
                    "",
                )
                .unwrap();
            let st = self.b.build_store(vp, bytes).unwrap();
            st.set_alignment(1).unwrap();
            return;
        }
        for l in 0..n {
            let e = self
                .b
                .build_extract_element(
                    bytes,
                    self.ctx.i32_type().const_int(u64::from(l), false),
                    "",
                )
                .unwrap();
            self.b
                .build_store(self.gep(p, self.add(off, self.i64(u64::from(l)))), e)
                .unwrap();
        }
    }

    /// `lanes` bytes of type `d` (`U8` or `I8`) at element `off` of `p`, as a byte vector.
    pub(super) fn load_bytes(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        self.load_vector(p, off, self.ctx.i8_type().vec_type(lanes), 1)
    }

    /// Byte vector `b` of type `d` (`U8` or `I8`) as f32 (exact).
    pub(super) fn bytes_to_f32(&self, b: VectorValue<'ctx>, d: DType) -> VectorValue<'ctx> {
        let lanes = b.get_type().get_size();
        let i32v = self.ctx.i32_type().vec_type(lanes);
        let w = if d == DType::U8 {
            self.b.build_int_z_extend(b, i32v, "").unwrap()
        } else {
            self.b.build_int_s_extend(b, i32v, "").unwrap()
        };
        self.b
            .build_signed_int_to_float(w, self.vec_ty(lanes), "")
            .unwrap()
    }
}
