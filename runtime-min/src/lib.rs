//! runtime-min: the `no_std`, allocation-free ABI shared by every library xla-aot generates.
//!
//! Contract (docs/codegen.md, the C API): status codes, arena alignment, model descriptors and a safe Rust wrapper
//! trait. Nothing here allocates, spawns threads or can fail except on a bad argument. The status
//! codes defined here are the single source of truth: the compiler emits them into generated code
//! and headers, and cbindgen writes them into `include/xla_aot_runtime.h`.
#![no_std]

/// The CUDA launcher's ABI, for the compiler (C apps see it through the generated model header).
/// cbindgen:ignore
#[cfg(feature = "cuda")]
pub mod cuda;

/// Status returned by every generated entry point. `0` is success; errors are negative so C callers
/// can test `if (status < 0)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The call succeeded.
    Ok = 0,
    /// A required pointer argument (arena, input or output) was null.
    NullPointer = -1,
    /// The arena pointer is not aligned to the model's `ARENA_ALIGN`.
    MisalignedArena = -2,
    /// A size or count argument is outside what the model was compiled for.
    BadArgument = -3,
    /// CUDA path only: the NVIDIA driver (`libcuda.so.1`) could not be loaded, or lacks an entry
    /// point the launcher needs (`<name>_cuda_error_name` says which).
    NoCudaDriver = -4,
    /// CUDA path only: a driver call failed; `<name>_cuda_error_name` gives the driver's name of
    /// the error (`CUDA_ERROR_NO_DEVICE`, ...).
    CudaError = -5,
    /// An output overlaps an input, another output or the arena (the bytes of each are its
    /// shape's; the arena's are the model's `ARENA_SIZE`): the model would read what it already
    /// overwrote. Checked before the model runs, with a few pointer comparisons per call.
    Overlap = -6,
    /// Builds with `--checks` only: the arena is in use by another call of the model (two threads
    /// share one arena, or a hook re-entered the model with it).
    ArenaInUse = -7,
}

impl Status {
    /// Every status, in code order (for generated headers).
    /// cbindgen:ignore
    pub const ALL: [Status; 8] = [
        Status::Ok,
        Status::NullPointer,
        Status::MisalignedArena,
        Status::BadArgument,
        Status::NoCudaDriver,
        Status::CudaError,
        Status::Overlap,
        Status::ArenaInUse,
    ];

    /// The C value of this status.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The C macro suffix used in generated headers (`XLA_AOT_STATUS_<NAME>`).
    pub const fn c_name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::NullPointer => "NULL_POINTER",
            Status::MisalignedArena => "MISALIGNED_ARENA",
            Status::BadArgument => "BAD_ARGUMENT",
            Status::NoCudaDriver => "NO_CUDA_DRIVER",
            Status::CudaError => "CUDA_ERROR",
            Status::Overlap => "OVERLAP",
            Status::ArenaInUse => "ARENA_IN_USE",
        }
    }

    /// The status for a C return value, if it is one.
    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }
}

/// Includes the Rust bindings of a model compiled by `xla_aot::Build::compile(name)` in this
/// crate's build script: a module `name` with `ARENA_SIZE`, `<TENSOR>_LEN` constants and a safe
/// `run(&mut Arena<ARENA_SIZE>, inputs..., outputs...) -> Result<(), Status>`.
#[macro_export]
macro_rules! include_model {
    ($name:literal) => {
        include!(concat!(
            env!("OUT_DIR"),
            "/xla-aot/",
            $name,
            "/",
            $name,
            ".rs"
        ));
    };
}

/// Alignment every generated model requires of its arena (bytes).
pub const ARENA_ALIGN: usize = 64;

/// An arena of `N` bytes aligned to [`ARENA_ALIGN`], usable as a `static` or on the stack.
#[repr(C, align(64))]
pub struct Arena<const N: usize> {
    bytes: [u8; N],
}

impl<const N: usize> Arena<N> {
    /// A zeroed arena.
    pub const fn new() -> Self {
        Arena { bytes: [0; N] }
    }

    /// The arena's size in bytes.
    pub const fn size(&self) -> usize {
        N
    }

    /// Pointer to pass to a generated `<name>_run`.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// One task of a parallel loop: `task(task_ctx, i)` does share `i` of a kernel's work.
pub type Task = unsafe extern "C" fn(task_ctx: *mut core::ffi::c_void, i: u32);

/// The app's parallel-for, registered with `<name>_set_parallel_for(hook, hook_ctx, threads)`:
/// `hook(hook_ctx, n, task, task_ctx)` must call `task(task_ctx, i)` exactly once for every
/// `i < n`, on any of its threads (the calling one included), and return when every call has
/// returned. The library never starts a thread; without a hook it runs single-threaded.
pub type ParallelFor = Option<
    unsafe extern "C" fn(
        hook_ctx: *mut core::ffi::c_void,
        n: u32,
        task: Task,
        task_ctx: *mut core::ffi::c_void,
    ),
>;

/// The app's kernel profiler, registered with `<name>_set_profiler(hook, ctx)`:
/// `hook(ctx, kernel, phase)` is called right before (`phase` 0) and right after (`phase` 1)
/// each kernel of a run, `kernel` being its index in the manifest's `kernels` list. A null hook
/// (the default) turns profiling off.
pub type Profiler =
    Option<unsafe extern "C" fn(ctx: *mut core::ffi::c_void, kernel: u32, phase: u32)>;

/// A kernel profiler for the safe `set_profiler` of generated Rust bindings:
/// `kernel_event(kernel, phase)` is called right before (`phase` 0) and right after (`phase` 1)
/// each kernel of a run, on the thread that runs the model, `kernel` being its index in the
/// manifest's `kernels` list. It must not run a model itself.
pub trait KernelProfiler: Sync {
    fn kernel_event(&self, kernel: u32, phase: u32);
}

/// The hook the bindings' safe `set_profiler(Some(sink))` registers, with `ctx` pointing at
/// `sink` (a `&'static &'static dyn KernelProfiler`). A null `ctx` is ignored, so a run that
/// races a registration (seeing this hook with the previous, null, context) calls nothing.
///
/// # Safety
/// `ctx` is null or points at a `&'static dyn KernelProfiler` that lives forever.
pub unsafe extern "C" fn profiler_trampoline(ctx: *mut core::ffi::c_void, kernel: u32, phase: u32) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: the caller's contract: `ctx` points at a `&'static dyn KernelProfiler`.
    let sink = unsafe { *(ctx as *const &'static dyn KernelProfiler) };
    sink.kernel_event(kernel, phase);
}

/// Element type of a model input or output.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32 = 0,
    I32 = 1,
}

/// Static description of one input or output tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorDesc {
    /// NUL-terminated name.
    pub name: *const u8,
    /// Element type.
    pub dtype: DType,
    /// Number of dimensions.
    pub rank: u32,
    /// Pointer to `rank` dimensions.
    pub dims: *const u32,
}

/// Static description of a compiled model.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModelDesc {
    /// NUL-terminated model name.
    pub name: *const u8,
    /// Bytes of arena the model needs.
    pub arena_size: usize,
    /// Required arena alignment.
    pub arena_align: usize,
    /// Number of inputs.
    pub num_inputs: u32,
    /// Number of outputs.
    pub num_outputs: u32,
}

/// A compiled model as seen from Rust: the safe wrapper generated bindings implement.
pub trait Model {
    /// Arena bytes needed.
    const ARENA_SIZE: usize;
    /// Inputs, as flat arrays.
    type Inputs<'a>;
    /// Outputs, as flat arrays.
    type Outputs<'a>;
    /// Runs the model; a status other than `Ok` is returned as an error.
    fn run(
        arena: &mut [u8],
        inputs: Self::Inputs<'_>,
        outputs: Self::Outputs<'_>,
    ) -> Result<(), Status>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_are_stable() {
        assert_eq!(Status::Ok.code(), 0);
        assert_eq!(Status::NullPointer.code(), -1);
        assert_eq!(Status::MisalignedArena.code(), -2);
        assert_eq!(Status::BadArgument.code(), -3);
        assert_eq!(Status::NoCudaDriver.code(), -4);
        assert_eq!(Status::CudaError.code(), -5);
        assert_eq!(Status::Overlap.code(), -6);
        assert_eq!(Status::ArenaInUse.code(), -7);
        assert_eq!(Status::from_code(-2), Some(Status::MisalignedArena));
        assert_eq!(Status::from_code(5), None);
    }

    #[test]
    fn arena_is_aligned() {
        let a = Arena::<100>::new();
        assert_eq!(core::mem::align_of_val(&a), ARENA_ALIGN);
        assert_eq!(a.size(), 100);
    }
}
