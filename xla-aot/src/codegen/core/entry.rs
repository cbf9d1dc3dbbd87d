//! The C API entry points of a host library (docs/codegen.md): `<name>_run_ptrs`, `<name>_run` and the
//! internal `<name>_impl` they share, and `<name>_set_parallel_for`, the registration of the
//! app's thread hook.
//!
//! Contract: both run functions return a `Status`: a null pointer or an arena not aligned to
//! `ARENA_ALIGN` is reported, never dereferenced; with `--weights external` both take the blob
//! as their first argument, `weights`, checked on every call (`weights_arg.rs`) and passed to
//! the body, which finds each constant at its offset in it; an output overlapping an input, another output
//! or the arena is `Overlap` (`overlap.rs`), before anything is read or written; in a `--checks`
//! build an arena another call is using is `ArenaInUse` (`canary.rs`); inputs and outputs whose C API dtype differs
//! from the IR's are converted around the model's call (`boundary.rs`), an int64 input outside
//! the i32 range (or a uint32 one from 2^31) being a `BadArgument`. The body calls every kernel in execution order
//! with its buffers (an input, an output, a constant's global or an arena slice), invoking each
//! the way its backend says (`Backend::invoke`: once, or once per grid invocation). The hook
//! registration is one internal global per model; what uses it (the CPU's parallel-for,
//! `cpu/parallel.rs`) reads it through [`Emitter::hook_global`]. The body reports each kernel to
//! the profiler hook, when one is registered (`profiler.rs`).

use super::emitter::{Backend, Emitter};
use super::module::Call;
use super::profiler::ProfilerSite;
use crate::arena::{Loc, root};
use crate::ir::InstId;
use inkwell::AddressSpace;
use inkwell::attributes::AttributeLoc;
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, StructType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, FunctionValue, GlobalValue, IntValue, PointerValue,
};
use runtime_min::Status;

/// Inputs plus outputs beyond which the entry points check the caller's pointers with loops over
/// arrays instead of code per pointer, and `<name>_run` stores its parameters into arrays and
/// calls `<name>_run_ptrs`. Code per pointer grew LLVM's compile time faster than linearly (2500
/// outputs: 22 s, issue 19); below this count it is a few hundred instructions and saves a loop.
const LARGE_API_BUFFERS: usize = 64;

/// Kernels called by one function of the model's body: a longer body is cut into parts of this
/// many (internal, not inlined). LLVM's jump threading and inliner grew faster than linearly in
/// one body of thousands of calls, each between two tests of the profiler hook (2500 kernels:
/// 9 s of O3). Our largest real models have about 300 kernels (densenet121).
const KERNELS_PER_PART: usize = 256;

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// An array of `ps` in a stack slot of `f`'s entry block (one element at least).
    fn pointer_table(
        &self,
        f: FunctionValue<'ctx>,
        ps: &[PointerValue<'ctx>],
    ) -> PointerValue<'ctx> {
        let i8p = self.i8p();
        let here = self.b.get_insert_block().unwrap();
        let entry = f.get_first_basic_block().unwrap();
        match entry.get_first_instruction() {
            Some(i) => self.b.position_before(&i),
            None => self.b.position_at_end(entry),
        }
        let ty = i8p.array_type(ps.len().max(1) as u32);
        let slot = self.b.build_alloca(ty, "buffers").unwrap();
        self.b.position_at_end(here);
        let table = self
            .b
            .build_pointer_cast(slot, i8p.ptr_type(AddressSpace::default()), "")
            .unwrap();
        for (k, &p) in ps.iter().enumerate() {
            self.b
                .build_store(self.gep(table, self.i64(k as u64)), p)
                .unwrap();
        }
        table
    }

    /// The exported `<name>_run_ptrs` / `<name>_run` and the internal body they share.
    pub(crate) fn entry_points(
        &self,
        globals: &[Option<PointerValue<'ctx>>],
        calls: &[Call<'ctx>],
        site: ProfilerSite<'_>,
    ) {
        let c = &self.hlo.entry;
        let params = c.parameters();
        let nin = params.len();
        let nout = c.outputs.len();
        let i8p = self.i8p();
        let i32t = self.ctx.i32_type();
        // A model with many buffers checks them with loops over arrays (`LARGE_API_BUFFERS`),
        // unless some are converted at the call (`boundary.rs`, code per converted buffer).
        let large = nin + nout > LARGE_API_BUFFERS && self.plan.staging.is_empty();
        // impl(arena, inputs, outputs): two arrays of buffer pointers, as `run_ptrs` takes them,
        // rather than one parameter per buffer: a call with thousands of arguments made LLVM's
        // instruction selection and register allocation quadratic (issue 19: 5000 outputs).
        let i8pp = i8p.ptr_type(AddressSpace::default());
        // `--weights external`: constants are offsets into the caller's blob, the body's fourth
        // parameter and the run functions' first (`w` of them before the arena).
        let blob = self.blob.borrow();
        let w = u32::from(blob.is_some());
        let mut imp_params: Vec<BasicMetadataTypeEnum> = vec![i8p.into(), i8pp.into(), i8pp.into()];
        if blob.is_some() {
            imp_params.push(i8p.into());
        }
        let imp = self.m.add_function(
            &format!("{}_impl", self.hlo.name),
            self.ctx.void_type().fn_type(&imp_params, false),
            Some(Linkage::Internal),
        );
        self.common_attrs(imp);
        self.b
            .position_at_end(self.ctx.append_basic_block(imp, "entry"));
        // The kernels' calls, in `fun` (the body, or one part of it), with its parameters.
        let emit_calls = |fun: FunctionValue<'ctx>, range: std::ops::Range<usize>| {
            let arena = fun.get_nth_param(0).unwrap().into_pointer_value();
            let blob_base = blob
                .as_ref()
                .map(|_| fun.get_nth_param(3).unwrap().into_pointer_value());
            let slot = |table: u32, k: usize| {
                let t = fun.get_nth_param(table).unwrap().into_pointer_value();
                self.b
                    .build_load(self.gep(t, self.i64(k as u64)), "")
                    .unwrap()
                    .into_pointer_value()
            };
            let input = |k: usize| slot(1, k);
            let output = |k: usize| slot(2, k);
            let ptr_of = |v: InstId| -> PointerValue<'ctx> {
                let r = root(&self.plan.locs, v);
                let p = match self.plan.locs[r.index()] {
                    Loc::Input(k) => input(k),
                    Loc::Output(k) => output(k),
                    Loc::Constant => match (globals[r.index()], &*blob, blob_base) {
                        (Some(g), ..) => g,
                        (None, Some(l), Some(base)) => {
                            let off = l.offsets[r.index()].expect("constants are in the blob");
                            self.gep(base, self.i64(off))
                        }
                        _ => unreachable!("constants have globals or blob offsets"),
                    },
                    Loc::Arena(off) => self.gep(arena, self.i64(off as u64)),
                    Loc::Alias(_) => unreachable!("root() follows aliases"),
                };
                let ty = self.ptr_type(c.inst(v).shape.dtype);
                self.b.build_pointer_cast(p, ty, "").unwrap()
            };
            let prof = self.load_profiler(site.owner);
            for (i, (f, operands, loc, elements, scratch)) in
                calls.iter().enumerate().take(range.end).skip(range.start)
            {
                let index = site.first + i as u32;
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
                // Each operand as the kernel's parameter type (a half weight is an `i16*`).
                args.extend(operands.iter().enumerate().map(|(j, &o)| {
                    let p = ptr_of(o);
                    let ty = f.get_nth_param(1 + j as u32).map(|q| q.get_type());
                    match ty {
                        Some(inkwell::types::BasicTypeEnum::PointerType(t))
                            if t != p.get_type() =>
                        {
                            BasicValueEnum::from(self.b.build_pointer_cast(p, t, "").unwrap())
                        }
                        _ => BasicValueEnum::from(p),
                    }
                }));
                if *scratch {
                    let (off, _) = self
                        .plan
                        .scratch
                        .expect("a kernel takes scratch the plan has");
                    let p = self.gep(arena, self.i64(off as u64));
                    let ty = self.ptr_type(crate::ir::DType::F32);
                    args.push(self.b.build_pointer_cast(p, ty, "").unwrap().into());
                }
                let a: Vec<_> = args.iter().map(|&v| v.into()).collect();
                self.report(&prof, index, 0);
                B::invoke(self, *f, &a, *elements);
                self.report(&prof, index, 1);
            }
        };
        if calls.len() <= KERNELS_PER_PART {
            emit_calls(imp, 0..calls.len());
        } else {
            // Parts of at most KERNELS_PER_PART kernels, called in order.
            let params: Vec<BasicMetadataValueEnum> =
                imp.get_param_iter().map(|p| p.into()).collect();
            for (j, lo) in (0..calls.len()).step_by(KERNELS_PER_PART).enumerate() {
                let part = self.m.add_function(
                    &format!("{}_impl_part{j}", self.hlo.name),
                    imp.get_type(),
                    Some(Linkage::Internal),
                );
                self.common_attrs(part);
                part.add_attribute(AttributeLoc::Function, self.attr("noinline"));
                self.b.build_call(part, &params, "").unwrap();
                let resume = self.b.get_insert_block().unwrap();
                self.b
                    .position_at_end(self.ctx.append_basic_block(part, "entry"));
                emit_calls(part, lo..(lo + KERNELS_PER_PART).min(calls.len()));
                self.b.build_return(None).unwrap();
                self.b.position_at_end(resume);
            }
        }
        self.b.build_return(None).unwrap();

        let status = |s: Status| i32t.const_int(s.code() as i64 as u64, true);
        // `return s` when `cond` holds (blocks `names`: the return, the way on).
        let return_if =
            |f: FunctionValue<'ctx>, cond: IntValue<'ctx>, s: Status, names: (&str, &str)| {
                let reject = self.ctx.append_basic_block(f, names.0);
                let go = self.ctx.append_basic_block(f, names.1);
                self.b.build_conditional_branch(cond, reject, go).unwrap();
                self.b.position_at_end(reject);
                self.b.build_return(Some(&status(s))).unwrap();
                self.b.position_at_end(go);
            };
        // Checks shared by both entry points: a null pointer or a misaligned arena is a status.
        let check_arena = |f: FunctionValue<'ctx>, arena: PointerValue<'ctx>| {
            let is_null = self.b.build_is_null(arena, "").unwrap();
            return_if(f, is_null, Status::NullPointer, ("null", "arena_ok"));
            let mis = self.is_misaligned(arena);
            return_if(f, mis, Status::MisalignedArena, ("misaligned", "aligned"));
        };
        // `--weights external`: the blob (parameter 0) is checked after the arena.
        let check_weights = |f: FunctionValue<'ctx>| -> Option<PointerValue<'ctx>> {
            let l = blob.as_ref()?;
            let weights = f.get_nth_param(0).unwrap().into_pointer_value();
            self.check_weights_arg(f, weights, l);
            Some(weights)
        };
        // The body's arguments: arena, inputs, outputs and the blob.
        let body_args = |arena: PointerValue<'ctx>,
                         ins: PointerValue<'ctx>,
                         outs: PointerValue<'ctx>,
                         weights: Option<PointerValue<'ctx>>|
         -> Vec<BasicMetadataValueEnum<'ctx>> {
            let mut a = vec![arena.into(), ins.into(), outs.into()];
            a.extend(weights.map(BasicMetadataValueEnum::from));
            a
        };
        // Returns NULL_POINTER when any of `ps` is null: one branch on all the tests
        // (`overlap.rs` `any_null`), not a chain of blocks across which every pointer stays live
        // (register allocation was quadratic in it: 2500 outputs took 22 s, issue 19).
        let check_null = |f: FunctionValue<'ctx>, ps: &[PointerValue<'ctx>]| {
            if !ps.is_empty() {
                return_if(f, self.any_null(ps), Status::NullPointer, ("null", "ok"));
            }
        };

        // The model's call between the dtype conversions of the C API (`boundary.rs`): an int64
        // input out of the i32 range returns BAD_ARGUMENT before the model runs.
        let call_converted = |f: FunctionValue<'ctx>,
                              args: &mut [PointerValue<'ctx>],
                              weights: Option<PointerValue<'ctx>>| {
            // An output sharing bytes with an input, another output or the arena (`overlap.rs`).
            if nout > 0 {
                let overlap = self.overlap_check(args);
                return_if(f, overlap, Status::Overlap, ("overlap", "disjoint"));
            }
            // `--checks`: the arena's in-use word (`canary.rs`), released on every later return.
            let canary = self.canary_acquire(f, args[0]);
            let (bad, outs) = self.boundary_in(f, args[0], args, nin);
            if !self.plan.staging.is_empty() {
                let reject = self.ctx.append_basic_block(f, "bad_argument");
                let go = self.ctx.append_basic_block(f, "run");
                self.b.build_conditional_branch(bad, reject, go).unwrap();
                self.b.position_at_end(reject);
                self.canary_release(canary);
                self.b
                    .build_return(Some(&status(Status::BadArgument)))
                    .unwrap();
                self.b.position_at_end(go);
            }
            let in_table = self.pointer_table(f, &args[1..1 + nin]);
            let out_table = self.pointer_table(f, &args[1 + nin..]);
            self.b
                .build_call(imp, &body_args(args[0], in_table, out_table, weights), "")
                .unwrap();
            self.boundary_out(f, args[0], &outs);
            self.canary_release(canary);
            self.b.build_return(Some(&status(Status::Ok))).unwrap();
        };

        // int <name>_run_ptrs([const void *weights,] void *arena, const void *const *inputs,
        //                    void *const *outputs)
        let mut rp_params: Vec<BasicMetadataTypeEnum> = vec![i8p.into(); w as usize];
        rp_params.extend::<[BasicMetadataTypeEnum; 3]>([i8p.into(), i8pp.into(), i8pp.into()]);
        let rp = self.m.add_function(
            &format!("{}_run_ptrs", self.hlo.name),
            i32t.fn_type(&rp_params, false),
            Some(Linkage::External),
        );
        self.common_attrs(rp);
        self.b
            .position_at_end(self.ctx.append_basic_block(rp, "entry"));
        let arena = rp.get_nth_param(w).unwrap().into_pointer_value();
        check_arena(rp, arena);
        let weights = check_weights(rp);
        let ins = rp.get_nth_param(w + 1).unwrap().into_pointer_value();
        let outs = rp.get_nth_param(w + 2).unwrap().into_pointer_value();
        check_null(rp, &[ins, outs]);
        if large {
            // Loops over the caller's arrays: code of constant size, whatever the model's count
            // of inputs and outputs.
            let null_in = self.any_null_in(ins, nin);
            let null_out = self.any_null_in(outs, nout);
            let any = self.b.build_or(null_in, null_out, "").unwrap();
            return_if(rp, any, Status::NullPointer, ("null", "ok"));
            let overlap = self.overlap_arrays(arena, ins, outs);
            return_if(rp, overlap, Status::Overlap, ("overlap", "disjoint"));
            let canary = self.canary_acquire(rp, arena);
            self.b
                .build_call(imp, &body_args(arena, ins, outs, weights), "")
                .unwrap();
            self.canary_release(canary);
            self.b.build_return(Some(&status(Status::Ok))).unwrap();
        } else {
            let mut args: Vec<PointerValue> = vec![arena];
            for (arr, n) in [(ins, nin), (outs, nout)] {
                for k in 0..n {
                    let p = self
                        .b
                        .build_load(self.gep(arr, self.i64(k as u64)), "")
                        .unwrap()
                        .into_pointer_value();
                    args.push(p);
                }
            }
            check_null(rp, &args[1..]);
            call_converted(rp, &mut args, weights);
        }

        // int <name>_run([const void *weights,] void *arena, const T *in0, ..., T *out0, ...)
        let mut tys: Vec<BasicMetadataTypeEnum> = vec![i8p.into(); w as usize + 1];
        for k in 0..nin {
            tys.push(self.ptr_type(self.hlo.input_dtype(k)).into());
        }
        for k in 0..nout {
            tys.push(self.ptr_type(self.hlo.output_dtype(k)).into());
        }
        let run = self.m.add_function(
            &format!("{}_run", self.hlo.name),
            i32t.fn_type(&tys, false),
            Some(Linkage::External),
        );
        self.common_attrs(run);
        self.b
            .position_at_end(self.ctx.append_basic_block(run, "entry"));
        let arena = run.get_nth_param(w).unwrap().into_pointer_value();
        if large {
            // The parameters in two arrays, then `run_ptrs`: no code per buffer beyond a store.
            let param = |k: usize| {
                let p = run
                    .get_nth_param(w + 1 + k as u32)
                    .unwrap()
                    .into_pointer_value();
                self.b.build_pointer_cast(p, i8p, "").unwrap()
            };
            let ins: Vec<_> = (0..nin).map(param).collect();
            let outs: Vec<_> = (nin..nin + nout).map(param).collect();
            let ins = self.pointer_table(run, &ins);
            let outs = self.pointer_table(run, &outs);
            let mut rp_args: Vec<BasicMetadataValueEnum> = Vec::new();
            if w == 1 {
                rp_args.push(run.get_nth_param(0).unwrap().into());
            }
            rp_args.extend::<[BasicMetadataValueEnum; 3]>([arena.into(), ins.into(), outs.into()]);
            let st = self
                .b
                .build_call(rp, &rp_args, "")
                .unwrap()
                .try_as_basic_value()
                .basic()
                .expect("run_ptrs returns a status");
            self.b.build_return(Some(&st)).unwrap();
            return;
        }
        check_arena(run, arena);
        let weights = check_weights(run);
        let mut args: Vec<PointerValue> = vec![arena];
        for k in 0..nin + nout {
            let p = run
                .get_nth_param(w + 1 + k as u32)
                .unwrap()
                .into_pointer_value();
            args.push(self.b.build_pointer_cast(p, i8p, "").unwrap());
        }
        check_null(run, &args[1..]);
        call_converted(run, &mut args, weights);
    }

    /// `{hook, hook_ctx, threads}`: the registration, one per model.
    pub(crate) fn hook_type(&self) -> StructType<'ctx> {
        self.ctx.struct_type(
            &[
                self.i8p().into(),
                self.i8p().into(),
                self.ctx.i64_type().into(),
            ],
            false,
        )
    }

    /// The registration of model `owner` (batch variants share the registration of the model
    /// they belong to), created on first use.
    pub(crate) fn hook_global(&self, owner: &str) -> GlobalValue<'ctx> {
        let name = format!("{owner}.parallel_for");
        if let Some(g) = self.m.get_global(&name) {
            return g;
        }
        let ty = self.hook_type();
        let g = self.m.add_global(ty, Some(AddressSpace::default()), &name);
        g.set_initializer(&ty.const_zero());
        g.set_linkage(Linkage::Internal);
        g
    }

    /// The exported `<name>_set_parallel_for`.
    pub(crate) fn parallel_setter(&self) {
        let g = self.hook_global(&self.hlo.name);
        let f = self.m.add_function(
            &format!("{}_set_parallel_for", self.hlo.name),
            self.ctx.void_type().fn_type(
                &[
                    BasicMetadataTypeEnum::from(self.i8p()),
                    self.i8p().into(),
                    self.ctx.i32_type().into(),
                ],
                false,
            ),
            Some(Linkage::External),
        );
        self.common_attrs(f);
        let saved = self.b.get_insert_block();
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        let gp = g.as_pointer_value();
        let hook = f.get_nth_param(0).unwrap();
        let hctx = f.get_nth_param(1).unwrap();
        let threads = self
            .b
            .build_int_z_extend(
                f.get_nth_param(2).unwrap().into_int_value(),
                self.ctx.i64_type(),
                "",
            )
            .unwrap();
        for (i, v) in [hook, hctx, threads.into()].into_iter().enumerate() {
            let p = self.b.build_struct_gep(gp, i as u32, "").unwrap();
            self.b.build_store(p, v).unwrap();
        }
        self.b.build_return(None).unwrap();
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
    }
}
