//! The measured single-core fp32 peak of this machine, the roof `xla-aot profile` holds kernels
//! against: independent vector FMA chains, generated for the host target and run by the JIT (the
//! same measurement as `bench/peak.c`, without a C compiler).
//!
//! Contract: [`fma_peak_gflops`] returns the best of a few timed runs of [`CHAINS_MAX`] (or, with
//! fewer registers, registers − 4) chains of `vector_bits / 32`-lane `llvm.fmuladd`, each chain
//! dependent on itself only, so the FMA pipes, not latency, bound it. It takes about 20 ms.

use crate::codegen::core::CodegenError;
use crate::codegen::core::target::{init_llvm, module_for, optimize, target_attrs, target_machine};
use crate::target::Target;
use inkwell::AddressSpace;
use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::module::Linkage;

/// Most accumulator chains: 16 covers 4-cycle latency × 2 pipes × 2 on every x86 and Arm core we
/// target (bench/peak.c uses 16 with 32 registers, 12 with 16).
const CHAINS_MAX: usize = 16;

/// Loop iterations per timed run (each runs every chain once).
const ITERATIONS: u64 = 1 << 20;

/// Timed runs; the fastest counts (a noisy machine only ever makes runs slower).
const RUNS: usize = 5;

type Peak = unsafe extern "C" fn(*mut f32, u64);

/// The host's single-core fp32 FMA peak in GFLOP/s.
pub fn fma_peak_gflops() -> Result<f64, CodegenError> {
    init_llvm();
    let target = Target::resolve("host").map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let tm = target_machine(&target)?;
    let ctx = Context::create();
    let m = module_for(&ctx, &tm, "peak");
    let lanes = (target.vector_bits / 32).max(1);
    let chains = (target.vector_registers as usize)
        .saturating_sub(4)
        .clamp(4, CHAINS_MAX);
    let f32t = ctx.f32_type();
    let vt = f32t.vec_type(lanes);
    let i64t = ctx.i64_type();
    let f = m.add_function(
        "peak",
        ctx.void_type().fn_type(
            &[f32t.ptr_type(AddressSpace::default()).into(), i64t.into()],
            false,
        ),
        Some(Linkage::External),
    );
    target_attrs(&ctx, f, &target);
    let fma = inkwell::intrinsics::Intrinsic::find("llvm.fmuladd")
        .expect("llvm.fmuladd exists")
        .get_declaration(&m, &[vt.into()])
        .expect("vector fmuladd");
    let b = ctx.create_builder();
    let entry = ctx.append_basic_block(f, "entry");
    let body = ctx.append_basic_block(f, "body");
    let done = ctx.append_basic_block(f, "done");
    b.position_at_end(entry);
    let splat = |x: f64| {
        inkwell::types::VectorType::const_vector(&vec![f32t.const_float(x); lanes as usize])
    };
    let (a, c) = (splat(0.999_999), splat(1e-7));
    let n = f.get_nth_param(1).unwrap().into_int_value();
    b.build_unconditional_branch(body).unwrap();
    b.position_at_end(body);
    let i = b.build_phi(i64t, "i").unwrap();
    let accs: Vec<_> = (0..chains)
        .map(|_| b.build_phi(vt, "acc").unwrap())
        .collect();
    let next: Vec<_> = accs
        .iter()
        .map(|acc| {
            crate::codegen::core::math::call_value(
                &b,
                fma,
                &[acc.as_basic_value(), a.into(), c.into()],
            )
        })
        .collect();
    let i1 = b
        .build_int_add(
            i.as_basic_value().into_int_value(),
            i64t.const_int(1, false),
            "",
        )
        .unwrap();
    i.add_incoming(&[(&i64t.const_zero(), entry), (&i1, body)]);
    for (k, acc) in accs.iter().enumerate() {
        acc.add_incoming(&[(&splat(k as f64), entry), (&next[k], body)]);
    }
    let more = b
        .build_int_compare(inkwell::IntPredicate::ULT, i1, n, "")
        .unwrap();
    b.build_conditional_branch(more, body, done).unwrap();
    b.position_at_end(done);
    let mut sum = next[0].into_vector_value();
    for v in &next[1..] {
        sum = b.build_float_add(sum, v.into_vector_value(), "").unwrap();
    }
    let out = b
        .build_pointer_cast(
            f.get_nth_param(0).unwrap().into_pointer_value(),
            vt.ptr_type(AddressSpace::default()),
            "",
        )
        .unwrap();
    b.build_store(out, sum).unwrap().set_alignment(4).unwrap();
    b.build_return(None).unwrap();
    m.verify().map_err(|e| CodegenError::Llvm(e.to_string()))?;
    optimize(&m, &tm)?;
    let engine = m
        .create_jit_execution_engine(OptimizationLevel::Default)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    // SAFETY: `peak` was generated above with exactly this signature; `out` holds one vector.
    let peak = unsafe { engine.get_function::<Peak>("peak") }
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let mut out = vec![0f32; lanes as usize];
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let t0 = std::time::Instant::now();
        // SAFETY: as above.
        unsafe { peak.call(out.as_mut_ptr(), ITERATIONS) };
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let flops = ITERATIONS as f64 * chains as f64 * lanes as f64 * 2.0;
    Ok(flops / best / 1e9)
}
