//! GPU code generation: every kernel in the per-element (grid) form, for NVIDIA PTX
//! (`ptx.rs`, launched by the CUDA launcher of `cuda_host.rs`) and for its host emulation (the
//! same kernels run on the CPU over their whole grid: `tests/grid.rs`, and the fake CUDA driver
//! of the launcher tests).
//!
//! Contract: a grid kernel `f(out, args..., index)` computes the output element(s) its trailing
//! index names (`Backend::elements` visits just that element, so every generic body of
//! `core/ops.rs` is a per-element body here); dot and convolution have element kernels
//! (`grid.rs`) and, when large enough, tiled ones (`tiled.rs`). No element reads another's
//! result. Constants are never packed: they keep their assigned layout, weights of dots and
//! convolutions in the half type with a half weight precision (`core/packing.rs`'
//! `Packings::for_gpu`; `half.rs` reads them, and forms `precision: f16` products in f16).
//!
//! The two forms of the same kernels ([`GridForm`]): on the device, kernels are internal and get
//! `.entry` wrappers computing the index from the thread grid, and the module has no host entry
//! points and no weight globals (weights live in the device arena); in the host emulation,
//! kernels are exported (`noinline`) and the C API entry points call each over its grid.

pub mod boundary;
pub mod cuda_host;
mod grid;
mod half;
mod kernel;
pub mod ptx;
pub mod tiled;

use crate::arena::staging::Side;
use crate::arena::{BufferPlan, Loc, root};
use crate::codegen::core::packing::Packings;
use crate::codegen::core::profiler::ProfilerSite;
use crate::codegen::core::target::module_for;
use crate::codegen::core::{Backend, CodegenError, Emitter, KernelInfo};
use crate::ir::{DType, InstId, Module as Hlo, Shape};
use crate::target::Target;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetMachine;
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, FunctionValue, IntValue};
use std::cell::{Cell, RefCell};

/// Where a module's grid kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridForm {
    /// On an NVIDIA GPU (PTX): one invocation per thread.
    Device,
    /// On the host, each kernel called over its whole grid by the entry points (a tiled kernel:
    /// once per block, running each phase for all of the block's threads).
    Host,
}

/// The GPU backend's state.
pub struct Gpu<'ctx> {
    form: GridForm,
    /// The index parameter of the grid kernel being generated.
    gid: Cell<Option<IntValue<'ctx>>>,
    /// Set by a kernel whose grid is not one invocation per output element (a tiled product:
    /// `tiled.rs`): its invocations.
    grid_size: Cell<Option<usize>>,
    /// The device entries generated, in launch order.
    entries: RefCell<Vec<GridLaunch>>,
    /// How the module's constants are stored (`Packings::for_gpu`).
    packings: Packings,
    /// The type the product of the kernel being generated reads its weight (rhs) in: F32, or
    /// the half type it is stored in (`half.rs`).
    weight: Cell<DType>,
    /// The channel shuffle the convolution being generated reads its input through
    /// (`ir/shuffle.rs` `conv_input`): input channel `s` is read at `source(s)`.
    in_channels: Cell<Option<crate::ir::shuffle::ChannelMap>>,
}

impl Gpu<'_> {
    fn new(form: GridForm, hlo: &Hlo) -> Self {
        Gpu {
            form,
            gid: Cell::new(None),
            grid_size: Cell::new(None),
            entries: RefCell::new(Vec::new()),
            packings: Packings::for_gpu(hlo),
            weight: Cell::new(DType::F32),
            in_channels: Cell::new(None),
        }
    }

    /// Whether the kernels run on the device (else: the host emulation).
    fn on_device(&self) -> bool {
        self.form == GridForm::Device
    }
}

/// The emitter of a GPU module.
pub(crate) type Cg<'a, 'ctx> = Emitter<'a, 'ctx, Gpu<'ctx>>;

/// One launch of a PTX-mode module (`ptx.rs` turns these into device-arena offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridLaunch {
    /// The `.entry` name.
    pub entry: String,
    /// Output elements: one thread each.
    pub elements: usize,
    /// What its pointer arguments address.
    pub buffers: Buffers,
}

/// The buffers of a [`GridLaunch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Buffers {
    /// A kernel of the model.
    Model {
        /// Where the kernel writes (an output or an arena slice).
        out: Loc,
        /// The values its operands read, aliases followed to the value owning the bytes.
        operands: Vec<InstId>,
    },
    /// A dtype conversion of the C API (`boundary.rs`): between the input's or output's device
    /// slot and its staging slice.
    Boundary(crate::arena::Staging),
}

impl<'ctx> Backend<'ctx> for Gpu<'ctx> {
    /// An invocation computes the element its index names.
    fn elements<'a>(
        cg: &Cg<'a, 'ctx>,
        shape: &Shape,
        body: &mut dyn FnMut(&Cg<'a, 'ctx>, &[IntValue<'ctx>]),
    ) {
        let gid = cg.be.gid.get().expect("grid kernels have an index");
        cg.element_at(gid, shape, body)
    }

    fn kernel<'a>(
        cg: &Cg<'a, 'ctx>,
        name: &str,
        id: InstId,
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        cg.kernel(name, id)
    }

    fn copy_kernel<'a>(cg: &Cg<'a, 'ctx>, name: &str, d: DType, n: usize) -> FunctionValue<'ctx> {
        cg.copy_kernel(name, d, n)
    }

    fn invocations<'a>(cg: &Cg<'a, 'ctx>, elements: usize) -> usize {
        cg.be.grid_size.take().unwrap_or(elements)
    }

    /// Host emulation of a GPU grid: one call per invocation.
    fn invoke<'a>(
        cg: &Cg<'a, 'ctx>,
        f: FunctionValue<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
        invocations: usize,
    ) {
        cg.for_loop(invocations, &mut |cg, gid| {
            let mut a = args.to_vec();
            a.push(gid.into());
            cg.b.build_call(f, &a, "").unwrap();
        });
    }
}

/// Generates the device module of `hlo` (`ptx.rs`): grid kernels with `.entry` wrappers, no
/// host entry points, no weight globals. Returns the kernels and the entries (name, elements).
#[allow(clippy::type_complexity)]
pub fn build_ptx_module<'ctx>(
    ctx: &'ctx Context,
    tm: &TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
) -> Result<(Module<'ctx>, Vec<KernelInfo>, Vec<GridLaunch>), CodegenError> {
    let module = module_for(ctx, tm, &hlo.name);
    let mut cg = Cg::new(
        ctx,
        &module,
        hlo,
        plan,
        target,
        Gpu::new(GridForm::Device, hlo),
    );
    let kernels = cg.build(
        false,
        ProfilerSite {
            owner: &hlo.name,
            first: 0,
        },
    )?;
    let entries = cg.be.entries.take();
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    Ok((module, kernels, entries))
}

/// Generates the (unoptimised, verified) host-emulation module of `hlo` for `target`: the grid
/// kernels, exported, and the C API entry points running each over its grid.
pub fn build_host_module<'ctx>(
    ctx: &'ctx Context,
    tm: &TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
) -> Result<(Module<'ctx>, Vec<KernelInfo>), CodegenError> {
    let module = module_for(ctx, tm, &hlo.name);
    let mut cg = Cg::new(
        ctx,
        &module,
        hlo,
        plan,
        target,
        Gpu::new(GridForm::Host, hlo),
    );
    let kernels = cg.build(
        true,
        ProfilerSite {
            owner: &hlo.name,
            first: 0,
        },
    )?;
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    Ok((module, kernels))
}

/// Adds batch variant `v` to a host-emulation `module` (no `<name>_set_parallel_for` or
/// `<name>_set_profiler` of its own; it reports to `site`).
pub fn add_host_variant<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    v: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    site: ProfilerSite<'_>,
) -> Result<Vec<KernelInfo>, CodegenError> {
    let mut cg = Cg::new(ctx, module, v, plan, target, Gpu::new(GridForm::Host, v));
    cg.build(false, site)
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The module's kernels and, on the device, their entries; in the host emulation, the
    /// constants' globals and the entry points (`own_setter`: with `<name>_set_parallel_for`,
    /// which the C API always exports).
    fn build(
        &mut self,
        own_setter: bool,
        site: ProfilerSite<'_>,
    ) -> Result<Vec<KernelInfo>, CodegenError> {
        self.check_module()?;
        // Device weights are uploaded into the device arena (`ptx.rs`), not globals.
        let globals = if self.be.on_device() {
            vec![None; self.hlo.entry.instructions.len()]
        } else {
            self.constant_globals(
                &self.be.packings,
                &crate::codegen::core::weights::Placement::InModule,
            )?
            .0
        };
        let (kernels, calls) = self.kernels()?;
        // The C API's dtype conversions (`boundary.rs`); in the host emulation they are exported
        // for the fake driver only: the entry points convert as on a CPU (`core/boundary.rs`).
        let conversions: Vec<_> = (self.plan.staging.iter())
            .filter(|st| st.elements > 0)
            .map(|st| (*st, self.boundary_kernel(st)))
            .collect();
        self.be.gid.set(None);
        if self.be.on_device() {
            let convert = |side_in: bool| {
                for (st, f) in &conversions {
                    if matches!(st.side, Side::Input(_)) == side_in {
                        let launch = GridLaunch {
                            entry: self.ptx_entry(*f),
                            elements: st.elements,
                            buffers: Buffers::Boundary(*st),
                        };
                        self.be.entries.borrow_mut().push(launch);
                    }
                }
            };
            convert(true);
            for (f, operands, loc, elements, _) in &calls {
                let launch = GridLaunch {
                    entry: self.ptx_entry(*f),
                    elements: *elements,
                    buffers: Buffers::Model {
                        out: *loc,
                        operands: operands.iter().map(|&o| root(&self.plan.locs, o)).collect(),
                    },
                };
                self.be.entries.borrow_mut().push(launch);
            }
            convert(false);
            return Ok(kernels);
        }
        self.entry_points(&globals, &calls, site);
        if own_setter {
            self.parallel_setter();
            self.profiler_setter();
        }
        Ok(kernels)
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
}
