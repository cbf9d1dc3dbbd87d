//! Compiler limits: every bound the compiler puts on its inputs and on its own work, in one place.
//!
//! Contract: no input makes the compiler abort, overflow its stack or run for minutes. Each limit
//! below is checked *before* the work or allocation it bounds, and an input over a limit gets a
//! positioned error (exit 1) that names the limit, or — for the optimisation limits — the compiler
//! keeps the slower-to-run but correct form (a fold declined, a fusion split, a loop not unrolled).
//! `docs/limits.md` lists each limit with its value, its reason and its message. Thresholds that
//! change only code quality stay beside the code they tune; the ones here bound memory, time or
//! stack depth.

/// Highest tensor rank any front end accepts (spec, ONNX, HLO text). Code generation nests one
/// loop (and one recursion level) per dimension; a rank-30000 input overflowed the stack. numpy
/// 2 allows 64 dimensions (`NPY_MAXDIMS`); real models stay below 8.
pub const MAX_RANK: usize = 64;

/// Deepest nesting of YAML collections (flow `[`/`{` and block indentation together) in a spec or
/// target file. A spec nests four levels (`ops` → op → attribute → list); the YAML parser's time
/// grows faster than linearly with depth (100k levels took 70 s to reject), so depth is checked
/// by a linear pre-scan before parsing.
pub const MAX_YAML_DEPTH: usize = 64;

/// Largest YAML spec or HLO text file (bytes). Text models carry no weights (those are in
/// `params`, or elided), but HLO text may print large constants: 256 MiB is far above any real
/// file and keeps the parse under a few seconds.
pub const MAX_TEXT_FILE_BYTES: u64 = 256 << 20;

/// Largest target description file (bytes): a target file is a dozen keys.
pub const MAX_TARGET_FILE_BYTES: u64 = 1 << 20;

/// Largest ONNX model file (bytes): protobuf messages are limited to 2 GiB; larger models keep
/// their weights in external data files ([`MAX_WEIGHT_FILE_BYTES`]).
pub const MAX_ONNX_FILE_BYTES: u64 = 2 << 30;

/// Largest weight file (safetensors, `.npy`, ONNX external data; bytes). Weights are read whole
/// into memory; 16 GiB holds an 8-billion-parameter model in f16.
pub const MAX_WEIGHT_FILE_BYTES: u64 = 16 << 30;

/// Largest folded constant that is kept (bytes): 4 MiB, tract's `CONST_FOLD_MEM_BUDGET` for the
/// same pass; weights pre-packed by later passes stay well below it for edge models, and larger
/// results stay computed at run time.
pub const CONST_FOLD_MEM_BUDGET: usize = 4 << 20;

/// Largest tensor (bytes of f32) the reference interpreter may materialise to fold one
/// instruction: each operand (a broadcast operand is expanded) and the result. Above it the
/// instruction is computed at run time. 64 MiB keeps a fold well under a second and a few hundred
/// MiB of host memory (the interpreter also builds an index per element); a one-element constant
/// padded to 2·10⁹ elements asked for 32 GB.
pub const FOLD_MAX_TENSOR_BYTES: usize = 64 << 20;

/// Most bytes of dense constants constant folding may create in one compile (the sum of every
/// kept fold, each at most [`CONST_FOLD_MEM_BUDGET`]). Past it, further folds are declined.
pub const FOLD_TOTAL_BYTES: usize = 256 << 20;

/// Largest tensor the ONNX importer computes at import time (elements: ConstantOfShape, integer
/// arithmetic on constants, Where of constants). The importer holds such values as 64-bit
/// numbers, so this is 128 MiB; a larger ConstantOfShape becomes a run-time broadcast of its value
/// and a larger fold stays a run-time op. 2^24 holds a 4096 × 4096 attention mask.
pub const IMPORT_FOLD_MAX_ELEMENTS: usize = 1 << 24;

/// Most elements the ONNX importer may compute at import time in total (the sum over every
/// node of [`IMPORT_FOLD_MAX_ELEMENTS`]-bounded values; 512 MiB as 64-bit numbers). Past it,
/// folds are declined and ConstantOfShape becomes a run-time broadcast.
pub const IMPORT_FOLD_TOTAL_ELEMENTS: usize = 1 << 26;

/// Largest per-element cost of one fused kernel's body, in the fusion cost model's op units
/// (`passes/fusion.rs`: simple arithmetic 1, division 4, transcendentals 20, `pow` 40). Past it a
/// group absorbs no more elementwise producers. LLVM's time per kernel grows faster than
/// linearly with its body: one kernel of a 2,000-op tanh/add chain (cost ≈ 21,000) took 20 s of
/// CPU, 84 kernels of cost ≤ 256 took 4 s (1,024: 5.4 s; 128: 4.1 s). 256 units is a dozen
/// transcendental functions, far above the fused epilogues of CNNs and transformers (bias,
/// activation, residual, normalisation steps).
pub const MAX_FUSION_COST: u32 = 256;

/// Most op-units per element a fused kernel's body may compute *as generated*: the elemental
/// code generator computes a value once per path from the kernel's root to it, so a chain whose
/// every step reads the one before twice (`Where(x < 0, x + 1, x)` repeated) doubles or triples
/// per step while [`MAX_FUSION_COST`] counts each value once (a 12-step chain took 2.4 s to
/// compile, 3x more per step, and a GridSample lowering 6.3 GB). Four times the fusion budget
/// leaves ordinary kernels alone (their shared values are broadcast scalars and constants, cost 1)
/// and stores the value whose next copy would pass it.
pub const MAX_EXPANDED_FUSION_COST: u64 = 4 * MAX_FUSION_COST as u64;

/// Most calls of the inline math functions (`exp`, `tanh`, `erf`, ...) inlined in one module
/// (`codegen/core/math_budget.rs`); later calls, in kernel order, call one out-of-line copy and
/// run unvectorised. Each inlined, vectorised call costs 2–4 ms of LLVM time (a 1,000-op
/// tanh/add chain: 500 calls, 2 to 3 s), so 512 bounds that part of a compile to one or two
/// seconds, while a transformer layer has a handful of such calls (GELU, softmax, normalisation).
pub const MAX_INLINED_MATH_CALLS: usize = 512;

/// Most vectors of kept elements a register reduction or pooling kernel unrolls
/// (`codegen/cpu/reduce.rs`: its code holds each vector's loads and adds once); a wider kept
/// minor-most dim takes the scalar loops, whose code size does not depend on the extent. A column
/// sum of a [2, 262144] tensor emitted 32,768 vectors (1 MB of code, 139 s). 1,024 vectors is 8,192
/// channels with AVX2 and 16,384 with AVX-512, above the widest channel counts of CNN pooling
/// (ResNet-50's global pool: 2,048).
pub const MAX_UNROLLED_REDUCE_VECTORS: usize = 1024;
