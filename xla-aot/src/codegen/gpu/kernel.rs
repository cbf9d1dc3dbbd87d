//! Kernel choice on a GPU: for each instruction, which grid kernel computes it.
//!
//! Contract: a dot or convolution large enough to fill 16×16 blocks becomes a tiled kernel
//! (`tiled.rs`), in an output fusion finishing each element with the fused epilogue when the
//! root has the heavy op's shape; smaller ones an element kernel (`grid.rs`) followed by the
//! epilogue; everything else the generic per-element bodies (`core/ops.rs`). Grid kernels take
//! a trailing `i64` index; in the host emulation they are exported (the fake CUDA driver of the
//! launcher tests runs them as the GPU would run their PTX, `tests/harness/fake_cuda.c`).

use super::{Cg, tiled};
use crate::codegen::core::ops::{At, epilogue_pool};
use crate::codegen::core::{CodegenError, Ix, Kernel, KernelAbi};
use crate::ir::{Computation, DType, FusionKind, InstId, Instruction, Op, Shape};
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Declares a grid kernel `void name(T* noalias out, U* noalias in0, ..., i64 index)`.
    pub(super) fn declare_kernel(
        &self,
        name: &str,
        out: DType,
        ins: &[DType],
        shared: &[bool],
    ) -> Kernel<'ctx> {
        let on_device = self.be.on_device();
        let abi = KernelAbi {
            index_param: true,
            // Host grid kernels are exported: the fake CUDA driver of the launcher tests runs
            // them as the GPU would run their PTX (`tests/harness/fake_cuda.c`).
            linkage: if on_device {
                Linkage::Internal
            } else {
                Linkage::External
            },
            // Device kernels are inlined into their `.entry` wrappers.
            noinline: !on_device,
        };
        let k = self.declare_kernel_with(abi, name, out, ins, shared);
        let nbufs = 1 + ins.len() as u32;
        self.be
            .gid
            .set(Some(k.f.get_nth_param(nbufs).unwrap().into_int_value()));
        k
    }

    /// A kernel copying element `index` of `n` elements of dtype `d`.
    pub(super) fn copy_kernel(&self, name: &str, d: DType, n: usize) -> FunctionValue<'ctx> {
        let k = self.declare_kernel(name, d, &[d], &[false]);
        let copy = |cg: &Self, i: IntValue<'ctx>| {
            let v = cg.b.build_load(cg.gep(k.args[0], i), "").unwrap();
            cg.b.build_store(cg.gep(k.out, i), v).unwrap();
        };
        let gid = self.be.gid.get().expect("grid kernels have an index");
        let inside = self
            .b
            .build_int_compare(IntPredicate::ULT, gid, self.i64(n as u64), "")
            .unwrap();
        self.if_then(inside, &mut |cg| copy(cg, gid));
        self.b.build_return(None).unwrap();
        k.f
    }

    /// The kernel computing instruction `id`.
    pub(super) fn kernel(
        &self,
        name: &str,
        id: InstId,
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        let c = &self.hlo.entry;
        let inst = c.inst(id);
        let mut ins: Vec<DType> = inst
            .operands
            .iter()
            .map(|&o| c.inst(o).shape.dtype)
            .collect();
        // A weight stored in a half type is passed as such (an `i16*`, `half.rs` widens it).
        let narrow = self.be.packings.reads_narrow(self.hlo, id);
        if let Some((w, d)) = narrow {
            for (j, &o) in inst.operands.iter().enumerate() {
                if o == w {
                    ins[j] = d;
                }
            }
        }
        self.be.weight.set(narrow.map_or(DType::F32, |(_, d)| d));
        let shared: Vec<bool> = inst
            .operands
            .iter()
            .map(|&o| self.plan.in_place[id.index()] == Some(o))
            .collect();
        let k = self.declare_kernel(name, inst.shape.dtype, &ins, &shared);
        let tiled = match &inst.op {
            Op::Dot(d) => tiled::tiled_geometry(
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
            } if tiled::conv_pays(
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
            FusionKind::Loop => self.fused_loop(k, comp),
            FusionKind::Input => {
                if let Some(heavy) = epilogue_pool(comp) {
                    // A pool with an elementwise epilogue (`passes/fusion.rs`): each thread pools
                    // its element into the output, then finishes it with the epilogue.
                    let h = comp.inst(heavy);
                    let at = |j: usize, ix: Ix<'_, 'ctx>| {
                        self.value_of(comp, h.operands[j], ix, k, None)
                    };
                    self.body(k, &h.op, &h.shape, &shapes(h), &at, &[]);
                    self.output_fusion_sweep(k, comp, heavy);
                    return;
                }
                let at =
                    |j: usize, ix: Ix<'_, 'ctx>| self.value_of(comp, root.operands[j], ix, k, None);
                self.body(k, &root.op, &root.shape, &shapes(root), &at, &[]);
            }
            FusionKind::Output => {
                let (heavy, bufs) = self.output_fusion_heavy(k, comp);
                let h = comp.inst(heavy);
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
                let shuffled = self.conv_channels(comp, heavy);
                let (l, r) = (
                    match &shuffled {
                        // Read through a channel shuffle, with the parameter's strides.
                        Some((_, xs)) => xs,
                        None => &comp.inst(h.operands[0]).shape,
                    },
                    &comp.inst(h.operands[1]).shape,
                );
                match &h.op {
                    Op::Dot(d) if same_place => {
                        if let Some(g) = tiled::tiled_geometry(d, l, r, &h.shape) {
                            let dims = tiled::out_dims(d, l, &h.shape);
                            self.dot_tiled(k, &g, (bufs[0], bufs[1]), dims, Some(&finish));
                            return;
                        }
                    }
                    Op::Convolution {
                        window,
                        feature_group_count,
                    } if same_place
                        && shuffled.is_none()
                        && tiled::conv_pays(*feature_group_count, l, r, &h.shape) =>
                    {
                        let shapes = (l, r, &h.shape);
                        self.conv_tiled(k, window, shapes, (bufs[0], bufs[1]), Some(&finish));
                        return;
                    }
                    _ => {}
                }
                let mut opnds = shapes(h);
                opnds[0] = l.clone();
                self.be.in_channels.set(shuffled.map(|(s, _)| s));
                self.body(k, &h.op, &h.shape, &opnds, &no_at, &bufs);
                self.be.in_channels.set(None);
                self.output_fusion_sweep(k, comp, heavy);
            }
        }
    }

    /// The loops computing `op` into `k.out` for this invocation's element: operands of
    /// elemental ops, reductions and argmax come from `at`; dot and convolution read `bufs`.
    fn body(
        &self,
        k: &Kernel<'ctx>,
        op: &Op,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
        bufs: &[PointerValue<'ctx>],
    ) {
        match op {
            Op::Dot(d) => self.dot_element(k, d, shape, opnds, bufs),
            Op::Convolution {
                window,
                feature_group_count,
            } => self.conv_element(k, window, *feature_group_count, shape, opnds, bufs),
            _ => self.generic_body(k, op, shape, opnds, at),
        }
    }
}
