//! The structure every module shares: the checks no backend passes, the constants' globals,
//! and the kernels in execution order with their manifest entries.
//!
//! Contract: a module has one kernel per entry instruction that computes a value (not a
//! parameter, constant or alias), named `<model>_k<i>_<instruction>` in instruction order, then
//! one `<model>_copy_out<k>` per output that is a copy of another value; [`Call`]s list them in
//! that order for the entry points. Which function computes each kernel is the backend's choice
//! (`Backend::kernel`).

use super::emitter::{Backend, Emitter};
use super::layout::is_row_major;
use super::packing::Packings;
use super::weights::{self, EXTERNAL_FROM, ExternalWeight, Placement};
use super::weights_blob::{self, BlobLayout};
use super::{CodegenError, KernelInfo};
use crate::arena::{ARENA_ALIGN, Loc};
use crate::ir::{Computation, InstId, Op};
use inkwell::AddressSpace;
use inkwell::GlobalVisibility;
use inkwell::module::Linkage;
use inkwell::values::{FunctionValue, PointerValue};

/// One kernel call of the entry points: the kernel, the values it reads, where it writes, and
/// its invocations (output elements, or the backend's grid: `Backend::invocations`).
/// A kernel call: the kernel, its operands, where its output goes, its invocations, and whether
/// it takes the plan's kernel scratch after its operands.
pub(crate) type Call<'ctx> = (FunctionValue<'ctx>, Vec<InstId>, Loc, usize, bool);

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

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// Refuses what no backend compiles: inputs and outputs that are not row-major (the C API's
    /// layout), dtypes without codegen.
    pub(crate) fn check_module(&self) -> Result<(), CodegenError> {
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
        Ok(())
    }

    /// Weights and constants: private read-only globals (raw bytes, cache-line aligned), each
    /// holding the bytes `packings` says it is stored as. With [`Placement::DataObject`], the
    /// large ones (`weights::EXTERNAL_FROM`) are declared `external hidden` instead, for the
    /// library's data object to define; with [`Placement::Listed`] the listed ones, under the
    /// listed symbols; they are returned in order. With [`Placement::Blob`],
    /// none is a global: all are written into the blob `self.blob` describes
    /// (`weights_blob.rs`), where the entry points find them.
    #[allow(clippy::type_complexity)]
    pub(crate) fn constant_globals(
        &self,
        packings: &Packings,
        placement: &Placement,
    ) -> Result<(Vec<Option<PointerValue<'ctx>>>, Vec<ExternalWeight>), CodegenError> {
        let c = &self.hlo.entry;
        let mut globals: Vec<Option<PointerValue<'ctx>>> = vec![None; c.instructions.len()];
        let mut outside = Vec::new();
        if *placement == Placement::Blob {
            self.blob_constants(packings)?;
            return Ok((globals, outside));
        }
        for (i, inst) in c.instructions.iter().enumerate() {
            if let Op::Constant(lit) = &inst.op {
                let Some(bytes) = lit.bytes() else {
                    return Err(CodegenError::Unsupported {
                        inst: inst.name.clone(),
                        reason: "the constant's data was elided in the HLO text".into(),
                    });
                };
                let id = InstId(i as u32);
                let len = packings.stored_len(id, &inst.shape);
                let symbol = match placement {
                    Placement::DataObject if len >= EXTERNAL_FROM => {
                        Some(weights::symbol(&self.hlo.name, id))
                    }
                    Placement::Listed(listed) => listed.get(i).cloned().flatten(),
                    _ => None,
                };
                if let Some(symbol) = symbol {
                    let Ok(len32) = u32::try_from(len) else {
                        return Err(CodegenError::Unsupported {
                            inst: inst.name.clone(),
                            reason: format!(
                                "the constant is stored in {len} bytes; one weight may hold at most 4 GiB"
                            ),
                        });
                    };
                    let g = self.m.add_global(
                        self.ctx.i8_type().array_type(len32),
                        Some(AddressSpace::default()),
                        &symbol,
                    );
                    g.set_constant(true);
                    g.set_linkage(Linkage::External);
                    g.set_visibility(GlobalVisibility::Hidden);
                    g.set_alignment(ARENA_ALIGN as u32);
                    globals[i] = Some(g.as_pointer_value());
                    outside.push(ExternalWeight { id, symbol });
                    continue;
                }
                // Weights are stored in their assigned layout, or packed for the kernels reading
                // them (`packing.rs`): re-laid here, at compile time.
                let physical = packings.stored_bytes(InstId(i as u32), bytes, &inst.shape);
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
        Ok((globals, outside))
    }

    /// [`Placement::Blob`]: every constant's stored bytes into the blob, and `self.blob` set.
    fn blob_constants(&self, packings: &Packings) -> Result<(), CodegenError> {
        let c = &self.hlo.entry;
        let mut consts = Vec::new();
        for (i, inst) in c.instructions.iter().enumerate() {
            if let Op::Constant(lit) = &inst.op {
                let Some(bytes) = lit.bytes() else {
                    return Err(CodegenError::Unsupported {
                        inst: inst.name.clone(),
                        reason: "the constant's data was elided in the HLO text".into(),
                    });
                };
                let id = InstId(i as u32);
                consts.push((id, bytes, packings.stored_len(id, &inst.shape)));
            }
        }
        let sizes: Vec<usize> = consts.iter().map(|k| k.2).collect();
        let (at, _) = weights_blob::offsets(&sizes);
        let bytes = weights_blob::write(&self.hlo.name, &sizes, |k, out| {
            let (id, data, _) = consts[k];
            packings.write_stored(id, data, &c.inst(id).shape, out)
        });
        let mut offsets = vec![None; c.instructions.len()];
        for ((id, ..), o) in consts.iter().zip(at) {
            offsets[id.index()] = Some(o as u64);
        }
        let checksum = weights_blob::fnv1a64(&bytes[weights_blob::HEADER..]);
        *self.blob.borrow_mut() = Some(BlobLayout {
            offsets,
            len: bytes.len() as u64,
            checksum,
            bytes,
        });
        Ok(())
    }

    /// The entry constants `operands` are (following aliases), in order, each once.
    fn constants_read(&self, operands: &[InstId]) -> Vec<u32> {
        let mut out = Vec::new();
        for &o in operands {
            let r = crate::arena::root(&self.plan.locs, o);
            if matches!(self.plan.locs[r.index()], Loc::Constant) && !out.contains(&r.0) {
                out.push(r.0);
            }
        }
        out
    }

    /// Every kernel in execution order: their manifest entries and their calls.
    #[allow(clippy::type_complexity)]
    pub(crate) fn kernels(&self) -> Result<(Vec<KernelInfo>, Vec<Call<'ctx>>), CodegenError> {
        let c = &self.hlo.entry;
        // The kernels.
        let mut kernels = Vec::new();
        let mut calls: Vec<Call<'ctx>> = Vec::new();
        for (i, inst) in c.instructions.iter().enumerate() {
            let id = InstId(i as u32);
            let loc = self.plan.locs[i];
            // An assembled concatenation was written by its operands' kernels.
            if matches!(inst.op, Op::Parameter { .. } | Op::Constant(_))
                || matches!(loc, Loc::Alias(_))
                || self.plan.assembled[i]
            {
                continue;
            }
            let name = format!(
                "{}_k{}_{}",
                self.hlo.name,
                kernels.len(),
                crate::util::c_name::c_chars(&inst.name)
            );
            let f = B::kernel(self, &name, id)?;
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
                constants: self.constants_read(&inst.operands),
            });
            let invocations = B::invocations(self, inst.shape.element_count());
            let scratch = B::takes_scratch(self, id);
            calls.push((f, inst.operands.clone(), loc, invocations, scratch));
        }
        for &(k, v) in &self.plan.copies {
            let name = format!("{}_copy_out{k}", self.hlo.name);
            let f = B::copy_kernel(
                self,
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
                constants: self.constants_read(&[v]),
            });
            calls.push((
                f,
                vec![v],
                Loc::Output(k),
                c.inst(v).shape.element_count(),
                false,
            ));
        }
        Ok((kernels, calls))
    }
}
