//! Loop fusions stored as bytes, four elements at a time: a quantized model's elementwise
//! integer arithmetic (TFLite's ADD: two rescaled inputs, three `multiply-q31`s, an offset and a
//! clamp) in 4-lane vectors on targets whose Q31 instructions work on them (Helium's
//! `vqrdmulh`/`vrshl`, NEON's `sqrdmulh`/`srshl`), where the scalar elemental loop's 64-bit
//! products keep LLVM's vectorizer away (resnet's residual ADDs on the M55: 40 instructions an
//! element).
//!
//! Contract: [`Cg::fused_loop_lanes`] emits the whole kernel and returns `true` only when every
//! instruction of the fusion is one it evaluates on lanes exactly as the elemental code does
//! per element: a parameter (a scalar, or an array with the root's dims and layout, read as its
//! stored bytes widened or as f32/i32), a broadcast of a scalar, a conversion between f32 and
//! i32 of values the ranges prove to be i32 integers, an i32 add, subtract, multiply, maximum or
//! minimum, an f32 add, subtract or multiply, and `multiply-q31` (`epilogue.rs`
//! `vmul_q31_ints`, the register epilogue's); the element count a multiple of 4. Element `i` of
//! every array is then its `i`-th in memory. The root's f32 integers are stored as bytes as
//! `fused_loop_bytes` stores them. Anything else returns `false` and emits nothing.

use super::Cg;
use crate::codegen::core::Kernel;
use crate::ir::{BinaryOp, Computation, DType, InstId, Op};
use inkwell::types::VectorType;
use inkwell::values::VectorValue;
use inkwell::{AddressSpace, IntPredicate};
use std::collections::HashMap;

/// Elements per step: one 128-bit vector of i32.
const LANES: u32 = 4;

/// Largest magnitude an f32 → i32 conversion's operand may have (below 2^31).
const I32_LIMIT: f64 = 2_147_483_648.0;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The byte-stored loop fusion `comp` of kernel `k` on 4 lanes (module doc); `false` when it
    /// does not qualify (nothing emitted).
    pub(super) fn fused_loop_lanes(&self, k: &Kernel<'ctx>, comp: &Computation) -> bool {
        if !(self.target.has_helium() || self.target.has_neon()) {
            return false;
        }
        let root_id = comp.outputs[0].value;
        let root = comp.inst(root_id);
        let n = root.shape.element_count();
        if n == 0 || n % LANES as usize != 0 || root.shape.dtype != DType::F32 {
            return false;
        }
        if !comp.ids().all(|id| self.lanes_op(comp, id, root_id)) {
            return false;
        }
        let i32v = self.ctx.i32_type().vec_type(LANES);
        let out_bytes = self
            .b
            .build_pointer_cast(
                k.out,
                self.ctx.i8_type().ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        self.for_loop(n / LANES as usize, &mut |cg, step| {
            let at = cg.mul(step, u64::from(LANES));
            let v = cg.lanes_values(k, comp, at, None);
            // The root's f32 integers as bytes, plus the bias of biased bytes
            // (`fused_loop_bytes`).
            let ints =
                cg.b.build_float_to_signed_int(v[&root_id], i32v, "")
                    .unwrap();
            let bias = cg
                .ctx
                .i32_type()
                .const_int(cg.be.out_bias.get() as u64, true);
            let ints =
                cg.b.build_int_add(ints, VectorType::const_vector(&[bias; LANES as usize]), "")
                    .unwrap();
            let bytes =
                cg.b.build_int_truncate(ints, cg.ctx.i8_type().vec_type(LANES), "")
                    .unwrap();
            let p =
                cg.b.build_pointer_cast(
                    cg.gep(out_bytes, at),
                    bytes.get_type().ptr_type(AddressSpace::default()),
                    "",
                )
                .unwrap();
            cg.b.build_store(p, bytes)
                .unwrap()
                .set_alignment(1)
                .unwrap();
        });
        true
    }

    /// An input fusion whose root sums its elementwise operand over whole images (a global
    /// average pool's sum, `[N, C, H, W] → [N, C, 1, 1]`, channels minor) on 4 lanes: per image
    /// and 4 channels, the operand's lanes at each pixel (what [`Cg::fused_loop_lanes`]
    /// evaluates) added in pixel order, the order the elemental sum adds them in. resnet's last
    /// residual ADD is fused into its pool so (the M55 spent 288k instructions there).
    pub(super) fn fused_pool_lanes(&self, k: &Kernel<'ctx>, comp: &Computation) -> bool {
        if !(self.target.has_helium() || self.target.has_neon()) {
            return false;
        }
        let root_id = comp.outputs[0].value;
        let root = comp.inst(root_id);
        let Op::ReduceWindow {
            kind: crate::ir::ReduceKind::Add,
            window,
        } = &root.op
        else {
            return false;
        };
        let x = root.operands[0];
        let xs = &comp.inst(x).shape;
        let channels_minor = [1, 3, 2, 0];
        let whole = xs.rank() == 4
            && window.size == [1, 1, xs.dims[2], xs.dims[3]]
            && window
                .pad_low
                .iter()
                .chain(&window.pad_high)
                .all(|&p| p == 0)
            && root.shape.dims == [xs.dims[0], xs.dims[1], 1, 1];
        if !whole
            || xs.layout.minor_to_major != channels_minor
            || root.shape.layout.minor_to_major != channels_minor
            || xs.dims[1] % LANES as usize != 0
            || root.shape.dtype != DType::F32
            || xs.dtype != DType::F32
            || self.be.out_stored.get().is_some()
        {
            return false;
        }
        if !comp
            .ids()
            .all(|id| id == root_id || self.lanes_op(comp, id, x))
        {
            return false;
        }
        let (n, c, pixels) = (xs.dims[0], xs.dims[1], xs.dims[2] * xs.dims[3]);
        self.for_loop(n, &mut |cg, img| {
            cg.for_loop(c / LANES as usize, &mut |cg, cv| {
                let ch = cg.mul(cv, u64::from(LANES));
                let sum = cg.slot(k.f, cg.vec_ty(LANES).into());
                cg.b.build_store(sum, cg.vec_ty(LANES).const_zero())
                    .unwrap();
                cg.for_loop(pixels, &mut |cg, p| {
                    // Element (img, ch, p) of a channels-minor image: (img·P + p)·C + ch.
                    let at = cg.add(cg.mul(cg.add(cg.mul(img, pixels as u64), p), c as u64), ch);
                    let v = cg.lanes_values(k, comp, at, Some(root_id));
                    let old = cg.b.build_load(sum, "").unwrap().into_vector_value();
                    let new = cg.b.build_float_add(old, v[&x], "").unwrap();
                    cg.b.build_store(sum, new).unwrap();
                });
                let total = cg.b.build_load(sum, "").unwrap().into_vector_value();
                let at = cg.add(cg.mul(img, c as u64), ch);
                cg.vstore(k.out, at, total);
            });
        });
        true
    }

    /// Every instruction of `comp` but `skip` evaluated on the 4 lanes of elements `at..at + 4`
    /// (their memory order: [`Cg::lanes_op`] admitted them all).
    fn lanes_values(
        &self,
        k: &Kernel<'ctx>,
        comp: &Computation,
        at: inkwell::values::IntValue<'ctx>,
        skip: Option<InstId>,
    ) -> HashMap<InstId, VectorValue<'ctx>> {
        let i32v = self.ctx.i32_type().vec_type(LANES);
        let f32v = self.vec_ty(LANES);
        let mut v: HashMap<InstId, VectorValue<'ctx>> = HashMap::new();
        for id in comp.ids().filter(|&id| Some(id) != skip) {
            let inst = comp.inst(id);
            let arg = |j: usize| v[&inst.operands[j]];
            let value = match &inst.op {
                Op::Parameter { index } => self.lanes_parameter(k, *index, inst, at),
                Op::Broadcast { .. } => arg(0),
                Op::Convert { to: DType::I32 } => {
                    self.b.build_float_to_signed_int(arg(0), i32v, "").unwrap()
                }
                Op::Convert { .. } => self.b.build_signed_int_to_float(arg(0), f32v, "").unwrap(),
                Op::Binary(op) if inst.shape.dtype == DType::F32 => {
                    let (a, b) = (arg(0), arg(1));
                    match op {
                        BinaryOp::Add => self.b.build_float_add(a, b, ""),
                        BinaryOp::Subtract => self.b.build_float_sub(a, b, ""),
                        _ => self.b.build_float_mul(a, b, ""),
                    }
                    .unwrap()
                }
                Op::Binary(op) => {
                    let (a, b) = (arg(0), arg(1));
                    let pick = |p: IntPredicate| {
                        let c = self.b.build_int_compare(p, a, b, "").unwrap();
                        self.b
                            .build_select(c, a, b, "")
                            .unwrap()
                            .into_vector_value()
                    };
                    match op {
                        BinaryOp::Add => self.b.build_int_add(a, b, "").unwrap(),
                        BinaryOp::Subtract => self.b.build_int_sub(a, b, "").unwrap(),
                        BinaryOp::Multiply => self.b.build_int_mul(a, b, "").unwrap(),
                        BinaryOp::Maximum => pick(IntPredicate::SGT),
                        _ => pick(IntPredicate::SLT),
                    }
                }
                Op::MulQ31 => {
                    let (x, m, s) = (inst.operands[0], inst.operands[1], inst.operands[2]);
                    self.vmul_q31_ints(v[&x], (x, m, s), (v[&m], v[&s]))
                }
                _ => unreachable!("lanes_op admitted only the ops above"),
            };
            v.insert(id, value);
        }
        v
    }

    /// Whether instruction `id` of `comp` (whose root is `root`) is one [`Cg::fused_loop_lanes`]
    /// evaluates on lanes.
    fn lanes_op(&self, comp: &Computation, id: InstId, root: InstId) -> bool {
        let inst = comp.inst(id);
        let shape = &inst.shape;
        let root_shape = &comp.inst(root).shape;
        let int = shape.dtype == DType::I32;
        let fits_i32 = |x: InstId| {
            self.fused_range(x)
                .is_some_and(|r| r.integer && !r.nan && r.lo > -I32_LIMIT && r.hi < I32_LIMIT)
        };
        match &inst.op {
            Op::Parameter { .. } => {
                shape.rank() == 0
                    || (shape.dims == root_shape.dims
                        && shape.layout == root_shape.layout
                        && matches!(shape.dtype, DType::F32 | DType::I32))
            }
            Op::Broadcast { .. } => comp.inst(inst.operands[0]).shape.rank() == 0,
            Op::Convert { to: DType::I32 } => {
                comp.inst(inst.operands[0]).shape.dtype == DType::F32 && fits_i32(inst.operands[0])
            }
            Op::Convert { to: DType::F32 } => comp.inst(inst.operands[0]).shape.dtype == DType::I32,
            Op::Binary(BinaryOp::Add | BinaryOp::Subtract | BinaryOp::Multiply) => {
                int || shape.dtype == DType::F32
            }
            Op::Binary(BinaryOp::Maximum | BinaryOp::Minimum) => int,
            Op::MulQ31 => int,
            _ => false,
        }
    }

    /// Parameter `index` (instruction `inst`) at elements `at..at + 4`: a scalar splat, or the
    /// array's bytes widened (as the elemental code reads them), or its f32 / i32 values.
    fn lanes_parameter(
        &self,
        k: &Kernel<'ctx>,
        index: usize,
        inst: &crate::ir::Instruction,
        at: inkwell::values::IntValue<'ctx>,
    ) -> VectorValue<'ctx> {
        let i32v = self.ctx.i32_type().vec_type(LANES);
        let p = k.args[index];
        if inst.shape.rank() == 0 {
            let x = self.load(p, self.i64(0), inst.shape.dtype);
            let undef = match inst.shape.dtype {
                DType::F32 => self.vec_ty(LANES).get_undef(),
                _ => i32v.get_undef(),
            };
            let v = self
                .b
                .build_insert_element(undef, x, self.ctx.i32_type().const_zero(), "")
                .unwrap();
            let zeros = i32v.const_zero();
            return self.b.build_shuffle_vector(v, undef, zeros, "").unwrap();
        }
        let byte = self.arg_bytes.borrow().get(index).copied().flatten();
        let ints = match byte {
            Some(d) => {
                let b = self.load_bytes(p, at, LANES);
                if d == DType::U8 {
                    self.b.build_int_z_extend(b, i32v, "").unwrap()
                } else {
                    self.b.build_int_s_extend(b, i32v, "").unwrap()
                }
            }
            None if inst.shape.dtype == DType::F32 => return self.vload(p, at, LANES),
            None => return self.load_vector(p, at, i32v, 4),
        };
        if inst.shape.dtype == DType::I32 {
            return ints;
        }
        self.b
            .build_signed_int_to_float(ints, self.vec_ty(LANES), "")
            .unwrap()
    }
}
