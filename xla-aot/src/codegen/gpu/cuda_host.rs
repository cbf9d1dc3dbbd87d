//! The CUDA launcher: host code (x86-64 or aarch64) that runs a PTX module's launches through the
//! NVIDIA driver API, loaded at run time.
//!
//! Contract: [`compile`] writes one object defining, for model `name`,
//!
//! - `int <name>_cuda_init(uint64_t *ctx, int device, uint64_t device_arena)`: zeroes the context,
//!   `dlopen`s `libcuda.so.1` (runtime-min's `cuda::DRIVER_LIBRARY`; no link-time CUDA
//!   dependency), resolves `cuda::DRIVER_FUNCTIONS`, initialises the driver, retains the device's
//!   primary context, loads `<name>_ptx`, looks up every entry, allocates the device arena (unless
//!   `device_arena` is non-zero: the caller's allocation of at least the layout's size) and
//!   uploads the weights once;
//! - `int <name>_cuda_run(uint64_t *ctx, void *stream, const void *const *inputs, void *const
//!   *outputs)`: copies the inputs in, launches every kernel in plan order on `stream` (null: the
//!   default stream), copies the outputs out and waits for the stream. No allocation, host or
//!   device. Inputs and outputs are in their C API dtypes (int64, uint8, float16, ...): the
//!   caller's bytes are copied as they are and converted on the device by launches of their own
//!   (`boundary.rs`, which says why there), after run has checked on the host that every int64
//!   and uint32 input value fits the model's int32 (else `BAD_ARGUMENT` before any driver call,
//!   as on the CPU);
//! - `int <name>_cuda_run_kernel(uint64_t *ctx, void *stream, uint32_t i)`: launches kernel `i`
//!   alone on the inputs already in the arena and waits (profiling: `scripts/gpu-check.sh`);
//! - `void <name>_cuda_destroy(uint64_t *ctx)`: releases whatever init acquired (safe after a
//!   failed init, and twice);
//! - `const char *<name>_cuda_error_name(const uint64_t *ctx)`: the last error (the driver's
//!   name for it, `CUDA_ERROR_NO_DEVICE`, or the launcher's own message).
//!
//! Statuses are runtime-min's: `NULL_POINTER`, `BAD_ARGUMENT` (not initialised, kernel index out of
//! range, an int64 or uint32 input out of the int32 range), `NO_CUDA_DRIVER` (no `libcuda.so.1`, or
//! an entry point missing), `CUDA_ERROR` (a driver call failed). The context layout is
//! `runtime_min::cuda::ctx`; every driver call runs with the primary context pushed and pops it
//! before returning, so any host thread may call.

use super::ptx::{BLOCK_THREADS, PtxModule};
use crate::arena::Staging;
use crate::arena::staging::Side;
use crate::codegen::core::target::module_for;
use crate::codegen::core::{CodegenError, optimize, target_machine};
use crate::ir::DType;
use crate::target::Target;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::targets::FileType;
use inkwell::types::{BasicMetadataTypeEnum, FunctionType, IntType, PointerType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, CallableValue, FunctionValue, IntValue, PointerValue,
};
use runtime_min::Status;
use runtime_min::cuda::{self as abi, ctx as slot};

/// The symbols of the data object (`emit/cuda.rs`) the launcher reads.
pub fn ptx_symbol(name: &str) -> String {
    format!("{name}_ptx")
}

/// The device image of the weights (`DeviceLayout::weights`).
pub fn weights_symbol(name: &str) -> String {
    format!("{name}_cuda_weights")
}

/// The launcher's exported functions.
pub fn exports(name: &str) -> Vec<String> {
    ["init", "run", "run_kernel", "destroy", "error_name"]
        .iter()
        .map(|f| format!("{name}_cuda_{f}"))
        .collect()
}

/// Words of the context of a module with `kernels` launches.
pub fn ctx_words(kernels: usize) -> usize {
    abi::CTX_HEAD_WORDS + kernels
}

/// Compiles the launcher of `ptx` (model `name`, `inputs` and `outputs` tensors) for the host CPU
/// of `target`; returns the object file.
pub fn compile(name: &str, ptx: &PtxModule, target: &Target) -> Result<Vec<u8>, CodegenError> {
    let tm = target_machine(target)?;
    let ctx = Context::create();
    let m = module_for(&ctx, &tm, &format!("{name}_cuda"));
    let l = Launcher::new(&ctx, &m, name, ptx, target);
    l.build();
    m.verify().map_err(|e| CodegenError::Llvm(e.to_string()))?;
    optimize(&m, &tm)?;
    Ok(tm
        .write_to_memory_buffer(&m, FileType::Object)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?
        .as_slice()
        .to_vec())
}

struct Launcher<'a, 'ctx> {
    ctx: &'ctx Context,
    m: &'a Module<'ctx>,
    b: Builder<'ctx>,
    name: &'a str,
    ptx: &'a PtxModule,
    target: &'a Target,
    i32t: IntType<'ctx>,
    i64t: IntType<'ctx>,
    i8p: PointerType<'ctx>,
}

/// The C type of each driver entry point, with every pointer as `i8*` (the driver writes its
/// handles into context words through them).
#[derive(Clone, Copy)]
enum Arg {
    I32,
    I64,
    Ptr,
}

fn driver_signature(f: &str) -> &'static [Arg] {
    use Arg::*;
    match f {
        "cuInit" | "cuDevicePrimaryCtxRelease_v2" => &[I32],
        "cuDeviceGet" => &[Ptr, I32],
        "cuDevicePrimaryCtxRetain" => &[Ptr, I32],
        "cuCtxPushCurrent_v2" | "cuCtxPopCurrent_v2" | "cuModuleUnload" => &[Ptr],
        "cuStreamSynchronize" => &[Ptr],
        "cuModuleLoadData" => &[Ptr, Ptr],
        "cuModuleGetFunction" => &[Ptr, Ptr, Ptr],
        "cuMemAlloc_v2" => &[Ptr, I64],
        "cuMemFree_v2" => &[I64],
        "cuMemcpyHtoD_v2" => &[I64, Ptr, I64],
        "cuMemcpyHtoDAsync_v2" => &[I64, Ptr, I64, Ptr],
        "cuMemcpyDtoHAsync_v2" => &[Ptr, I64, I64, Ptr],
        "cuLaunchKernel" => &[Ptr, I32, I32, I32, I32, I32, I32, I32, Ptr, Ptr, Ptr],
        "cuGetErrorName" => &[I32, Ptr],
        other => panic!("runtime-min lists driver function {other} without a signature here"),
    }
}

impl<'a, 'ctx> Launcher<'a, 'ctx> {
    fn new(
        ctx: &'ctx Context,
        m: &'a Module<'ctx>,
        name: &'a str,
        ptx: &'a PtxModule,
        target: &'a Target,
    ) -> Self {
        Launcher {
            ctx,
            m,
            b: ctx.create_builder(),
            name,
            ptx,
            target,
            i32t: ctx.i32_type(),
            i64t: ctx.i64_type(),
            i8p: ctx.i8_type().ptr_type(AddressSpace::default()),
        }
    }

    fn build(&self) {
        let record = self.record_error();
        let launch = self.launch_fn();
        self.init(record);
        self.run(record, launch);
        self.run_kernel(record, launch);
        self.destroy();
        self.error_name();
    }

    // ---- small helpers ---------------------------------------------------------------------

    fn i32c(&self, v: i64) -> IntValue<'ctx> {
        self.i32t.const_int(v as u64, true)
    }

    fn i64c(&self, v: u64) -> IntValue<'ctx> {
        self.i64t.const_int(v, false)
    }

    fn status(&self, s: Status) -> IntValue<'ctx> {
        self.i32c(s.code() as i64)
    }

    fn function(
        &self,
        name: &str,
        ty: FunctionType<'ctx>,
        linkage: Linkage,
    ) -> FunctionValue<'ctx> {
        let f = self.m.add_function(name, ty, Some(linkage));
        f.add_attribute(
            AttributeLoc::Function,
            self.ctx.create_enum_attribute(
                inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind"),
                0,
            ),
        );
        crate::codegen::core::target::target_attrs(self.ctx, f, self.target);
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        f
    }

    /// A private NUL-terminated string constant.
    fn string(&self, s: &str) -> PointerValue<'ctx> {
        let init = self.ctx.const_string(s.as_bytes(), true);
        let g = self.m.add_global(init.get_type(), None, "str");
        g.set_initializer(&init);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        g.set_unnamed_addr(true);
        self.b
            .build_pointer_cast(g.as_pointer_value(), self.i8p, "")
            .unwrap()
    }

    /// An external byte symbol (defined by the data object).
    fn extern_bytes(&self, symbol: &str) -> PointerValue<'ctx> {
        let g = self
            .m
            .get_global(symbol)
            .unwrap_or_else(|| self.m.add_global(self.ctx.i8_type(), None, symbol));
        g.as_pointer_value()
    }

    /// An external C function.
    fn extern_fn(&self, name: &str, ty: FunctionType<'ctx>) -> FunctionValue<'ctx> {
        self.m
            .get_function(name)
            .unwrap_or_else(|| self.m.add_function(name, ty, Some(Linkage::External)))
    }

    fn word_ptr(&self, c: PointerValue<'ctx>, w: usize) -> PointerValue<'ctx> {
        unsafe {
            self.b
                .build_in_bounds_gep(c, &[self.i64c(w as u64)], "")
                .unwrap()
        }
    }

    /// The address of word `w`, as the `void **` / `int *` out-parameter of a driver call.
    fn word_out(&self, c: PointerValue<'ctx>, w: usize) -> PointerValue<'ctx> {
        self.b
            .build_pointer_cast(self.word_ptr(c, w), self.i8p, "")
            .unwrap()
    }

    fn load_word(&self, c: PointerValue<'ctx>, w: usize) -> IntValue<'ctx> {
        self.b
            .build_load(self.word_ptr(c, w), "")
            .unwrap()
            .into_int_value()
    }

    fn load_ptr_word(&self, c: PointerValue<'ctx>, w: usize) -> PointerValue<'ctx> {
        self.b
            .build_int_to_ptr(self.load_word(c, w), self.i8p, "")
            .unwrap()
    }

    fn store_word(&self, c: PointerValue<'ctx>, w: usize, v: IntValue<'ctx>) {
        self.b.build_store(self.word_ptr(c, w), v).unwrap();
    }

    fn store_ptr_word(&self, c: PointerValue<'ctx>, w: usize, p: PointerValue<'ctx>) {
        let v = self.b.build_ptr_to_int(p, self.i64t, "").unwrap();
        self.store_word(c, w, v);
    }

    /// Calls driver entry point `f` through its context slot; returns the `CUresult`.
    fn driver(
        &self,
        c: PointerValue<'ctx>,
        f: &str,
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> IntValue<'ctx> {
        let params: Vec<BasicMetadataTypeEnum> = driver_signature(f)
            .iter()
            .map(|a| match a {
                Arg::I32 => self.i32t.into(),
                Arg::I64 => self.i64t.into(),
                Arg::Ptr => self.i8p.into(),
            })
            .collect();
        assert_eq!(params.len(), args.len(), "{f}: argument count");
        let ty = self.i32t.fn_type(&params, false);
        let w = abi::driver_slot(f).expect("a runtime-min driver function");
        let p = self
            .b
            .build_int_to_ptr(
                self.load_word(c, w),
                ty.ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        let callee = CallableValue::try_from(p).expect("a function pointer");
        self.b
            .build_call(callee, args, "")
            .unwrap()
            .try_as_basic_value()
            .basic()
            .expect("the callee returns a value")
            .into_int_value()
    }

    /// `if rc != CUDA_SUCCESS { record(ctx, rc); goto fail }`, continuing after it.
    fn check(
        &self,
        record: FunctionValue<'ctx>,
        c: PointerValue<'ctx>,
        rc: IntValue<'ctx>,
        fail: inkwell::basic_block::BasicBlock<'ctx>,
    ) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let bad = self.ctx.append_basic_block(f, "driver_error");
        let ok = self.ctx.append_basic_block(f, "ok");
        let is_err = self
            .b
            .build_int_compare(
                IntPredicate::NE,
                rc,
                self.i32c(abi::CUDA_SUCCESS as i64),
                "",
            )
            .unwrap();
        self.b.build_conditional_branch(is_err, bad, ok).unwrap();
        self.b.position_at_end(bad);
        self.b
            .build_call(record, &[c.into(), rc.into()], "")
            .unwrap();
        self.b.build_unconditional_branch(fail).unwrap();
        self.b.position_at_end(ok);
    }

    /// Calls `f` (a C function or one of ours) and returns its value.
    fn call_value(
        &self,
        f: FunctionValue<'ctx>,
        args: &[BasicValueEnum<'ctx>],
    ) -> BasicValueEnum<'ctx> {
        crate::codegen::core::math::call_value(&self.b, f, args)
    }

    /// `if cond { message = msg; return status }`, continuing after it.
    fn fail_if(&self, c: PointerValue<'ctx>, cond: IntValue<'ctx>, msg: &str, status: Status) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let fail = self.ctx.append_basic_block(f, "fail");
        let go = self.ctx.append_basic_block(f, "continue");
        self.b.build_conditional_branch(cond, fail, go).unwrap();
        self.b.position_at_end(fail);
        self.set_message(c, msg);
        self.b.build_return(Some(&self.status(status))).unwrap();
        self.b.position_at_end(go);
    }

    /// `if cond { return status }`, continuing after it.
    fn return_if(&self, cond: IntValue<'ctx>, ret: Option<BasicValueEnum<'ctx>>) {
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let out = self.ctx.append_basic_block(f, "return");
        let go = self.ctx.append_basic_block(f, "continue");
        self.b.build_conditional_branch(cond, out, go).unwrap();
        self.b.position_at_end(out);
        match ret {
            Some(v) => self.b.build_return(Some(&v)).unwrap(),
            None => self.b.build_return(None).unwrap(),
        };
        self.b.position_at_end(go);
    }

    fn is_null(&self, p: PointerValue<'ctx>) -> IntValue<'ctx> {
        self.b.build_is_null(p, "").unwrap()
    }

    fn is_zero(&self, v: IntValue<'ctx>) -> IntValue<'ctx> {
        self.b
            .build_int_compare(IntPredicate::EQ, v, v.get_type().const_zero(), "")
            .unwrap()
    }

    /// Sets the error message word to a static string.
    fn set_message(&self, c: PointerValue<'ctx>, msg: &str) {
        let s = self.string(msg);
        self.store_ptr_word(c, slot::ERROR_NAME, s);
    }

    /// The ctx parameter of `f` (its first), typed `i64*`.
    fn ctx_param(&self, f: FunctionValue<'ctx>) -> PointerValue<'ctx> {
        f.get_nth_param(0).unwrap().into_pointer_value()
    }

    fn i64p(&self) -> PointerType<'ctx> {
        self.i64t.ptr_type(AddressSpace::default())
    }

    /// A block that pops the pushed context and returns `CUDA_ERROR`.
    fn pop_and_fail(&self, f: FunctionValue<'ctx>, c: PointerValue<'ctx>) -> FailBlocks<'ctx> {
        let here = self.b.get_insert_block().unwrap();
        let pushed = self.ctx.append_basic_block(f, "fail_pushed");
        let unpushed = self.ctx.append_basic_block(f, "fail");
        self.b.position_at_end(pushed);
        let scratch = self.b.build_alloca(self.i64t, "popped").unwrap();
        let scratch = self.b.build_pointer_cast(scratch, self.i8p, "").unwrap();
        self.driver(c, "cuCtxPopCurrent_v2", &[scratch.into()]);
        self.b.build_unconditional_branch(unpushed).unwrap();
        self.b.position_at_end(unpushed);
        self.b
            .build_return(Some(&self.status(Status::CudaError)))
            .unwrap();
        self.b.position_at_end(here);
        FailBlocks { pushed, unpushed }
    }

    /// Pops the current context (into a scratch word).
    fn pop(&self, c: PointerValue<'ctx>) -> IntValue<'ctx> {
        let scratch = self.b.build_alloca(self.i64t, "popped").unwrap();
        let scratch = self.b.build_pointer_cast(scratch, self.i8p, "").unwrap();
        self.driver(c, "cuCtxPopCurrent_v2", &[scratch.into()])
    }

    // ---- the functions -----------------------------------------------------------------------

    /// `record(ctx, rc)`: the error code and the driver's name for it in the context.
    fn record_error(&self) -> FunctionValue<'ctx> {
        let ty = self
            .ctx
            .void_type()
            .fn_type(&[self.i64p().into(), self.i32t.into()], false);
        let f = self.function(
            &format!("{}_cuda_record_error", self.name),
            ty,
            Linkage::Internal,
        );
        let c = self.ctx_param(f);
        let rc = f.get_nth_param(1).unwrap().into_int_value();
        let code = self.b.build_int_z_extend(rc, self.i64t, "").unwrap();
        self.store_word(c, slot::ERROR_CODE, code);
        self.store_word(c, slot::ERROR_NAME, self.i64c(0));
        let named = self.driver(
            c,
            "cuGetErrorName",
            &[rc.into(), self.word_out(c, slot::ERROR_NAME).into()],
        );
        let failed = self
            .b
            .build_int_compare(IntPredicate::NE, named, self.i32c(0), "")
            .unwrap();
        let null = self.is_zero(self.load_word(c, slot::ERROR_NAME));
        let unnamed = self.b.build_or(failed, null, "").unwrap();
        self.return_if(self.b.build_not(unnamed, "").unwrap(), None);
        self.set_message(c, abi::UNNAMED_ERROR_MESSAGE);
        self.b.build_return(None).unwrap();
        f
    }

    /// `launch(ctx, stream, i) -> CUresult`: kernel `i` on `stream` with its planned arguments.
    fn launch_fn(&self) -> FunctionValue<'ctx> {
        let ty = self.i32t.fn_type(
            &[self.i64p().into(), self.i8p.into(), self.i32t.into()],
            false,
        );
        let f = self.function(&format!("{}_cuda_launch", self.name), ty, Linkage::Internal);
        let c = self.ctx_param(f);
        let stream = f.get_nth_param(1).unwrap().into_pointer_value();
        let index = f.get_nth_param(2).unwrap().into_int_value();
        let most = self
            .ptx
            .launches
            .iter()
            .map(|l| l.args.len())
            .max()
            .unwrap_or(1);
        let values = self
            .b
            .build_array_alloca(self.i64t, self.i64c(most as u64), "values")
            .unwrap();
        let params = self
            .b
            .build_array_alloca(self.i8p, self.i64c(most as u64), "params")
            .unwrap();
        let base = self.load_word(c, slot::ARENA);
        let invalid = self.ctx.append_basic_block(f, "no_such_kernel");
        let cases: Vec<_> = (0..self.ptx.launches.len())
            .map(|i| {
                (
                    self.i32c(i as i64),
                    self.ctx.append_basic_block(f, &format!("kernel{i}")),
                )
            })
            .collect();
        self.b.build_switch(index, invalid, &cases).unwrap();
        self.b.position_at_end(invalid);
        // CUDA_ERROR_INVALID_VALUE: callers check the index first; never reached.
        self.b.build_return(Some(&self.i32c(1))).unwrap();
        for (i, (l, (_, block))) in self.ptx.launches.iter().zip(&cases).enumerate() {
            self.b.position_at_end(*block);
            for (j, &off) in l.args.iter().enumerate() {
                let v = unsafe {
                    self.b
                        .build_in_bounds_gep(values, &[self.i64c(j as u64)], "")
                        .unwrap()
                };
                let addr = self.b.build_int_add(base, self.i64c(off), "").unwrap();
                self.b.build_store(v, addr).unwrap();
                let p = unsafe {
                    self.b
                        .build_in_bounds_gep(params, &[self.i64c(j as u64)], "")
                        .unwrap()
                };
                let vp = self.b.build_pointer_cast(v, self.i8p, "").unwrap();
                self.b.build_store(p, vp).unwrap();
            }
            let function = self.load_ptr_word(c, slot::KERNELS + i);
            let one = self.i32c(1);
            let params_p = self.b.build_pointer_cast(params, self.i8p, "").unwrap();
            let rc = self.driver(
                c,
                "cuLaunchKernel",
                &[
                    function.into(),
                    self.i32c(l.blocks() as i64).into(),
                    one.into(),
                    one.into(),
                    self.i32c(BLOCK_THREADS as i64).into(),
                    one.into(),
                    one.into(),
                    self.i32c(0).into(),
                    stream.into(),
                    params_p.into(),
                    self.i8p.const_null().into(),
                ],
            );
            self.b.build_return(Some(&rc)).unwrap();
        }
        f
    }

    fn init(&self, record: FunctionValue<'ctx>) {
        let ty = self.i32t.fn_type(
            &[self.i64p().into(), self.i32t.into(), self.i64t.into()],
            false,
        );
        let f = self.function(&format!("{}_cuda_init", self.name), ty, Linkage::External);
        let c = self.ctx_param(f);
        let device = f.get_nth_param(1).unwrap().into_int_value();
        let arena = f.get_nth_param(2).unwrap().into_int_value();
        self.return_if(
            self.is_null(c),
            Some(self.status(Status::NullPointer).into()),
        );
        for w in 0..ctx_words(self.ptx.launches.len()) {
            self.store_word(c, w, self.i64c(0));
        }
        self.set_message(c, abi::NO_ERROR_MESSAGE);
        let dlopen = self.extern_fn(
            "dlopen",
            self.i8p
                .fn_type(&[self.i8p.into(), self.i32t.into()], false),
        );
        let dlsym = self.extern_fn(
            "dlsym",
            self.i8p.fn_type(&[self.i8p.into(), self.i8p.into()], false),
        );
        let lib = self.string(abi::DRIVER_LIBRARY);
        let rtld = self.i32c(abi::RTLD_NOW as i64).into();
        let h = self
            .call_value(dlopen, &[lib.into(), rtld])
            .into_pointer_value();
        self.fail_if(
            c,
            self.is_null(h),
            abi::NO_DRIVER_MESSAGE,
            Status::NoCudaDriver,
        );
        self.store_ptr_word(c, slot::LIBRARY, h);
        for (i, name) in abi::DRIVER_FUNCTIONS.iter().enumerate() {
            let sym = self.string(name);
            let p = self
                .call_value(dlsym, &[h.into(), sym.into()])
                .into_pointer_value();
            let missing = format!("{}{name}", abi::MISSING_ENTRY_PREFIX);
            self.fail_if(c, self.is_null(p), &missing, Status::NoCudaDriver);
            self.store_ptr_word(c, slot::DRIVER + i, p);
        }
        let fail = self.pop_and_fail(f, c);
        let rc = self.driver(c, "cuInit", &[self.i32c(0).into()]);
        self.check(record, c, rc, fail.unpushed);
        let rc = self.driver(
            c,
            "cuDeviceGet",
            &[self.word_out(c, slot::DEVICE).into(), device.into()],
        );
        self.check(record, c, rc, fail.unpushed);
        let dev = self
            .b
            .build_int_truncate(self.load_word(c, slot::DEVICE), self.i32t, "")
            .unwrap();
        let rc = self.driver(
            c,
            "cuDevicePrimaryCtxRetain",
            &[self.word_out(c, slot::CONTEXT).into(), dev.into()],
        );
        self.check(record, c, rc, fail.unpushed);
        // The high word of DEVICE marks the primary context as retained (destroy releases it).
        let retained = self
            .b
            .build_or(self.load_word(c, slot::DEVICE), self.i64c(1 << 32), "")
            .unwrap();
        self.store_word(c, slot::DEVICE, retained);
        let rc = self.driver(
            c,
            "cuCtxPushCurrent_v2",
            &[self.load_ptr_word(c, slot::CONTEXT).into()],
        );
        self.check(record, c, rc, fail.unpushed);
        let image =
            self.b
                .build_pointer_cast(self.extern_bytes(&ptx_symbol(self.name)), self.i8p, "");
        let rc = self.driver(
            c,
            "cuModuleLoadData",
            &[self.word_out(c, slot::MODULE).into(), image.unwrap().into()],
        );
        self.check(record, c, rc, fail.pushed);
        for (i, l) in self.ptx.launches.iter().enumerate() {
            let entry = self.string(&l.entry);
            let rc = self.driver(
                c,
                "cuModuleGetFunction",
                &[
                    self.word_out(c, slot::KERNELS + i).into(),
                    self.load_ptr_word(c, slot::MODULE).into(),
                    entry.into(),
                ],
            );
            self.check(record, c, rc, fail.pushed);
        }
        // The device arena: the caller's, or one allocation of the layout's size.
        let theirs = self.ctx.append_basic_block(f, "caller_arena");
        let ours = self.ctx.append_basic_block(f, "allocate_arena");
        let have = self.ctx.append_basic_block(f, "have_arena");
        self.b
            .build_conditional_branch(self.is_zero(arena), ours, theirs)
            .unwrap();
        self.b.position_at_end(theirs);
        self.store_word(c, slot::ARENA, arena);
        self.b.build_unconditional_branch(have).unwrap();
        self.b.position_at_end(ours);
        let rc = self.driver(
            c,
            "cuMemAlloc_v2",
            &[
                self.word_out(c, slot::ARENA).into(),
                self.i64c(self.ptx.layout.size).into(),
            ],
        );
        self.check(record, c, rc, fail.pushed);
        self.store_word(c, slot::OWNS_ARENA, self.i64c(1));
        self.b.build_unconditional_branch(have).unwrap();
        self.b.position_at_end(have);
        let weights = &self.ptx.layout.weights;
        if !weights.is_empty() {
            let src = self
                .b
                .build_pointer_cast(self.extern_bytes(&weights_symbol(self.name)), self.i8p, "")
                .unwrap();
            let rc = self.driver(
                c,
                "cuMemcpyHtoD_v2",
                &[
                    self.load_word(c, slot::ARENA).into(),
                    src.into(),
                    self.i64c(weights.len() as u64).into(),
                ],
            );
            self.check(record, c, rc, fail.pushed);
        }
        let rc = self.pop(c);
        self.check(record, c, rc, fail.unpushed);
        self.store_word(c, slot::READY, self.i64c(1));
        self.b.build_return(Some(&self.status(Status::Ok))).unwrap();
    }

    /// The checks `run` and `run_kernel` share: a context, initialised.
    fn check_ready(&self, c: PointerValue<'ctx>) {
        self.return_if(
            self.is_null(c),
            Some(self.status(Status::NullPointer).into()),
        );
        let not_ready = self.is_zero(self.load_word(c, slot::READY));
        self.fail_if(c, not_ready, abi::NOT_READY_MESSAGE, Status::BadArgument);
        self.store_word(c, slot::ERROR_CODE, self.i64c(0));
        self.set_message(c, abi::NO_ERROR_MESSAGE);
    }

    fn run(&self, record: FunctionValue<'ctx>, launch: FunctionValue<'ctx>) {
        let i8pp = self.i8p.ptr_type(AddressSpace::default());
        let ty = self.i32t.fn_type(
            &[
                self.i64p().into(),
                self.i8p.into(),
                i8pp.into(),
                i8pp.into(),
            ],
            false,
        );
        let f = self.function(&format!("{}_cuda_run", self.name), ty, Linkage::External);
        let c = self.ctx_param(f);
        let stream = f.get_nth_param(1).unwrap().into_pointer_value();
        let inputs = f.get_nth_param(2).unwrap().into_pointer_value();
        let outputs = f.get_nth_param(3).unwrap().into_pointer_value();
        let null = Some(self.status(Status::NullPointer).into());
        self.return_if(self.is_null(inputs), null);
        self.return_if(self.is_null(outputs), null);
        self.check_ready(c);
        let tensor = |array: PointerValue<'ctx>, k: usize| -> PointerValue<'ctx> {
            let p = unsafe {
                self.b
                    .build_in_bounds_gep(array, &[self.i64c(k as u64)], "")
                    .unwrap()
            };
            self.b.build_load(p, "").unwrap().into_pointer_value()
        };
        let layout = &self.ptx.layout;
        let ins: Vec<_> = (0..layout.inputs.len())
            .map(|k| tensor(inputs, k))
            .collect();
        let outs: Vec<_> = (0..layout.outputs.len())
            .map(|k| tensor(outputs, k))
            .collect();
        for p in ins.iter().chain(&outs) {
            self.return_if(self.is_null(*p), null);
        }
        // int64, uint64 and uint32 inputs must fit the model's int32 (`boundary.rs`), checked
        // where the caller's buffer is, before anything is copied.
        for st in &layout.boundary {
            if let (Side::Input(k), DType::I64 | DType::U64 | DType::U32) = (st.side, st.api) {
                let bad = self.out_of_range(ins[k], st);
                self.fail_if(c, bad, abi::RANGE_MESSAGE, Status::BadArgument);
            }
        }
        let fail = self.pop_and_fail(f, c);
        let rc = self.driver(
            c,
            "cuCtxPushCurrent_v2",
            &[self.load_ptr_word(c, slot::CONTEXT).into()],
        );
        self.check(record, c, rc, fail.unpushed);
        let base = self.load_word(c, slot::ARENA);
        let at = |off: u64| self.b.build_int_add(base, self.i64c(off), "").unwrap();
        for (p, (_, r)) in ins.iter().zip(&layout.inputs) {
            let rc = self.driver(
                c,
                "cuMemcpyHtoDAsync_v2",
                &[
                    at(r.offset).into(),
                    (*p).into(),
                    self.i64c(r.bytes).into(),
                    stream.into(),
                ],
            );
            self.check(record, c, rc, fail.pushed);
        }
        for i in 0..self.ptx.launches.len() {
            let rc = self
                .call_value(
                    launch,
                    &[c.into(), stream.into(), self.i32c(i as i64).into()],
                )
                .into_int_value();
            self.check(record, c, rc, fail.pushed);
        }
        for (p, (_, r)) in outs.iter().zip(&layout.outputs) {
            let rc = self.driver(
                c,
                "cuMemcpyDtoHAsync_v2",
                &[
                    (*p).into(),
                    at(r.offset).into(),
                    self.i64c(r.bytes).into(),
                    stream.into(),
                ],
            );
            self.check(record, c, rc, fail.pushed);
        }
        let rc = self.driver(c, "cuStreamSynchronize", &[stream.into()]);
        self.check(record, c, rc, fail.pushed);
        let rc = self.pop(c);
        self.check(record, c, rc, fail.unpushed);
        self.b.build_return(Some(&self.status(Status::Ok))).unwrap();
    }

    /// Whether some element of the caller's int64, uint64 or uint32 input `p` (staged as `st`) is
    /// outside the i32 range: one branch-free pass over the elements (an `i1`).
    fn out_of_range(&self, p: PointerValue<'ctx>, st: &Staging) -> IntValue<'ctx> {
        let i1 = self.ctx.bool_type();
        if st.elements == 0 {
            return i1.const_zero();
        }
        let elem = if st.api.size_bytes() == 8 {
            self.i64t
        } else {
            self.i32t
        };
        let p = self
            .b
            .build_pointer_cast(p, elem.ptr_type(AddressSpace::default()), "")
            .unwrap();
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let pre = self.b.get_insert_block().unwrap();
        let body = self.ctx.append_basic_block(f, "range_check");
        let done = self.ctx.append_basic_block(f, "range_checked");
        self.b.build_unconditional_branch(body).unwrap();
        self.b.position_at_end(body);
        let i = self.b.build_phi(self.i64t, "i").unwrap();
        let acc = self.b.build_phi(i1, "bad").unwrap();
        let iv = i.as_basic_value().into_int_value();
        let at = unsafe { self.b.build_in_bounds_gep(p, &[iv], "").unwrap() };
        let x = self.b.build_load(at, "").unwrap().into_int_value();
        let bad = if st.api == DType::I64 {
            let t = self.b.build_int_truncate(x, self.i32t, "").unwrap();
            let back = self.b.build_int_s_extend(t, self.i64t, "").unwrap();
            self.b
                .build_int_compare(IntPredicate::NE, back, x, "")
                .unwrap()
        } else if st.api == DType::U64 {
            let lim = self.i64t.const_int(1 << 31, false);
            self.b
                .build_int_compare(IntPredicate::UGE, x, lim, "")
                .unwrap()
        } else {
            // uint32 values of 2^31 and above: the top bit is set.
            self.b
                .build_int_compare(IntPredicate::SLT, x, self.i32c(0), "")
                .unwrap()
        };
        let acc2 = self
            .b
            .build_or(acc.as_basic_value().into_int_value(), bad, "")
            .unwrap();
        let next = self.b.build_int_add(iv, self.i64c(1), "").unwrap();
        let more = self
            .b
            .build_int_compare(IntPredicate::ULT, next, self.i64c(st.elements as u64), "")
            .unwrap();
        i.add_incoming(&[(&self.i64c(0), pre), (&next, body)]);
        acc.add_incoming(&[(&i1.const_zero(), pre), (&acc2, body)]);
        self.b.build_conditional_branch(more, body, done).unwrap();
        self.b.position_at_end(done);
        acc2
    }

    fn run_kernel(&self, record: FunctionValue<'ctx>, launch: FunctionValue<'ctx>) {
        let ty = self.i32t.fn_type(
            &[self.i64p().into(), self.i8p.into(), self.i32t.into()],
            false,
        );
        let f = self.function(
            &format!("{}_cuda_run_kernel", self.name),
            ty,
            Linkage::External,
        );
        let c = self.ctx_param(f);
        let stream = f.get_nth_param(1).unwrap().into_pointer_value();
        let index = f.get_nth_param(2).unwrap().into_int_value();
        self.check_ready(c);
        let n = self.i32c(self.ptx.launches.len() as i64);
        let out_of_range = self
            .b
            .build_int_compare(IntPredicate::UGE, index, n, "")
            .unwrap();
        self.return_if(out_of_range, Some(self.status(Status::BadArgument).into()));
        let fail = self.pop_and_fail(f, c);
        let rc = self.driver(
            c,
            "cuCtxPushCurrent_v2",
            &[self.load_ptr_word(c, slot::CONTEXT).into()],
        );
        self.check(record, c, rc, fail.unpushed);
        let rc = self
            .call_value(launch, &[c.into(), stream.into(), index.into()])
            .into_int_value();
        self.check(record, c, rc, fail.pushed);
        let rc = self.driver(c, "cuStreamSynchronize", &[stream.into()]);
        self.check(record, c, rc, fail.pushed);
        let rc = self.pop(c);
        self.check(record, c, rc, fail.unpushed);
        self.b.build_return(Some(&self.status(Status::Ok))).unwrap();
    }

    fn destroy(&self) {
        let ty = self.ctx.void_type().fn_type(&[self.i64p().into()], false);
        let f = self.function(
            &format!("{}_cuda_destroy", self.name),
            ty,
            Linkage::External,
        );
        let c = self.ctx_param(f);
        self.return_if(self.is_null(c), None);
        let words = ctx_words(self.ptx.launches.len());
        let clear = self.ctx.append_basic_block(f, "clear");
        let release = self.ctx.append_basic_block(f, "release");
        self.b
            .build_conditional_branch(
                self.is_zero(self.load_word(c, slot::LIBRARY)),
                clear,
                release,
            )
            .unwrap();
        self.b.position_at_end(release);
        let when = |cond: IntValue<'ctx>, body: &dyn Fn()| {
            let then = self.ctx.append_basic_block(f, "then");
            let done = self.ctx.append_basic_block(f, "endif");
            self.b.build_conditional_branch(cond, then, done).unwrap();
            self.b.position_at_end(then);
            body();
            self.b.build_unconditional_branch(done).unwrap();
            self.b.position_at_end(done);
        };
        let nonzero = |w: usize| {
            self.b
                .build_not(self.is_zero(self.load_word(c, w)), "")
                .unwrap()
        };
        when(nonzero(slot::CONTEXT), &|| {
            self.driver(
                c,
                "cuCtxPushCurrent_v2",
                &[self.load_ptr_word(c, slot::CONTEXT).into()],
            );
            let owned = self
                .b
                .build_and(nonzero(slot::OWNS_ARENA), nonzero(slot::ARENA), "")
                .unwrap();
            when(owned, &|| {
                self.driver(c, "cuMemFree_v2", &[self.load_word(c, slot::ARENA).into()]);
            });
            when(nonzero(slot::MODULE), &|| {
                self.driver(
                    c,
                    "cuModuleUnload",
                    &[self.load_ptr_word(c, slot::MODULE).into()],
                );
            });
            self.pop(c);
        });
        let dev = self.load_word(c, slot::DEVICE);
        let flag = self
            .b
            .build_right_shift(dev, self.i64c(32), false, "")
            .unwrap();
        when(self.b.build_not(self.is_zero(flag), "").unwrap(), &|| {
            let d = self
                .b
                .build_int_truncate(self.load_word(c, slot::DEVICE), self.i32t, "")
                .unwrap();
            self.driver(c, "cuDevicePrimaryCtxRelease_v2", &[d.into()]);
        });
        let dlclose = self.extern_fn("dlclose", self.i32t.fn_type(&[self.i8p.into()], false));
        self.b
            .build_call(dlclose, &[self.load_ptr_word(c, slot::LIBRARY).into()], "")
            .unwrap();
        self.b.build_unconditional_branch(clear).unwrap();
        self.b.position_at_end(clear);
        for w in 0..words {
            self.store_word(c, w, self.i64c(0));
        }
        self.b.build_return(None).unwrap();
    }

    fn error_name(&self) {
        let ty = self.i8p.fn_type(&[self.i64p().into()], false);
        let f = self.function(
            &format!("{}_cuda_error_name", self.name),
            ty,
            Linkage::External,
        );
        let c = self.ctx_param(f);
        let none = self.string(abi::NO_ERROR_MESSAGE);
        self.return_if(self.is_null(c), Some(none.into()));
        self.return_if(
            self.is_zero(self.load_word(c, slot::ERROR_NAME)),
            Some(none.into()),
        );
        let p = self.load_ptr_word(c, slot::ERROR_NAME);
        self.b.build_return(Some(&p)).unwrap();
    }
}

/// Where a failing driver call goes: with the context pushed (pop it first) or not.
struct FailBlocks<'ctx> {
    pushed: inkwell::basic_block::BasicBlock<'ctx>,
    unpushed: inkwell::basic_block::BasicBlock<'ctx>,
}
