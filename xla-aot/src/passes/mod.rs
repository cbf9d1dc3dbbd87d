//! The optimisation pipeline: small named passes over the HLO module, each verified after it runs.
//!
//! Contract: a [`Pass`] has a name and a `run` that returns whether it changed the module. A
//! [`Pipeline`] runs its passes in order, repeating the whole list until nothing changes (a fixed
//! point, bounded by [`MAX_FIXED_POINT_ROUNDS`]), runs the verifier after every pass that changed
//! something (a failure is a compiler bug and names the pass), records the time of each pass, skips
//! the passes the user disabled, and hands every intermediate module to an observer (for dumps).
//!
//! Why this order: constant folding first turns the batch-norm statistics into per-channel
//! constants; the algebraic simplifier removes identities that lowering and folding leave behind;
//! batch-norm folding then has constants to fold into the weights; max pools then move before
//! the monotone chains that fed them (what batch-norm folding left: bias, ReLU, quantization),
//! so those run on the pooled values; elementwise chains after a concatenation of convolution
//! results move before it, so each piece becomes a convolution's epilogue; channel shuffles then
//! move down to the convolution that reads them (past the per-channel bias, ReLU and depthwise
//! convolution between); integer steps the value ranges prove exact go (a requantization's zero
//! point and s32 round trip); CSE merges what is left identical; DCE drops what nothing reads.
//! Each enables the others, hence the fixed point.

pub mod bn_fold;
pub mod concat_sink;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod exact_integers;
pub mod fusion;
pub mod layout;
pub mod one_hot;
pub mod pool_first;
pub mod rewrite;
pub mod schedule;
pub mod shuffle_sink;
pub mod simplify;

use crate::ir::{Module, VerifyError, verify};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Upper bound on rounds of the fixed-point loop; every pass shrinks or keeps the module, so the
/// loop settles in a few rounds; more means two passes undo each other (a compiler bug).
pub const MAX_FIXED_POINT_ROUNDS: usize = 16;

/// One transformation of a module.
pub trait Pass {
    /// The name used by `--disable-pass` and in dumps.
    fn name(&self) -> &'static str;
    /// Transforms `m`; returns whether anything changed.
    fn run(&self, m: &mut Module) -> bool;
    /// The decisions of the last run, with their reasons (fusion's `fusion.log`).
    fn take_log(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A pass broke an invariant, or the pipeline did not settle: a compiler bug.
#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("internal compiler error: after pass `{pass}`: {error}")]
    Verify { pass: String, error: VerifyError },
    #[error("internal compiler error: the pipeline did not reach a fixed point in {0} rounds")]
    NoFixedPoint(usize),
}

/// Every pass of the default pipeline, by name (for `--disable-pass` and its error message).
pub const PASS_NAMES: &[&str] = &[
    "constant-folding",
    "algebraic-simplifier",
    "batchnorm-folding",
    "pool-first",
    "concat-sinking",
    "shuffle-sinking",
    "exact-integers",
    "cse",
    "dce",
    "layout-assignment",
    "fusion",
    "schedule",
];

/// The default pipeline's stages; each runs to a fixed point before the next starts. Fusion comes
/// on the simplified graph, and DCE after it drops what the fusions absorbed; scheduling comes last,
/// when the kernels (and so the buffers) are final.
const DEFAULT_STAGES: &[&[&str]] = &[
    &[
        "constant-folding",
        "algebraic-simplifier",
        "batchnorm-folding",
        "pool-first",
        "concat-sinking",
        "shuffle-sinking",
        "exact-integers",
        "cse",
        "dce",
    ],
    &["layout-assignment"],
    &["fusion", "dce"],
    &["schedule"],
];

/// The pass called `name`.
pub fn make_pass(name: &str) -> Option<Box<dyn Pass>> {
    Some(match name {
        "constant-folding" => Box::new(const_fold::ConstantFolding::default()),
        "algebraic-simplifier" => Box::new(simplify::AlgebraicSimplifier),
        "batchnorm-folding" => Box::new(bn_fold::BatchNormFolding),
        "pool-first" => Box::new(pool_first::PoolFirst),
        "concat-sinking" => Box::new(concat_sink::ConcatSink),
        "shuffle-sinking" => Box::new(shuffle_sink::ShuffleSink),
        "exact-integers" => Box::new(exact_integers::ExactIntegers),
        "cse" => Box::new(cse::Cse),
        "dce" => Box::new(dce::Dce),
        "fusion" => Box::new(fusion::FusionPass::default()),
        "layout-assignment" => Box::new(layout::LayoutAssignment),
        "schedule" => Box::new(schedule::Schedule),
        _ => return None,
    })
}

/// What the pipeline did, per pass run.
#[derive(Debug, Clone)]
pub struct PassRecord {
    /// Pass name.
    pub name: &'static str,
    /// Fixed-point round (0-based).
    pub round: usize,
    /// Whether it changed the module.
    pub changed: bool,
    /// Wall time.
    pub time: Duration,
    /// The pass's decisions (see [`Pass::take_log`]).
    pub log: Vec<String>,
}

/// Stages of passes; each stage runs to a fixed point.
pub struct Pipeline {
    stages: Vec<Vec<Box<dyn Pass>>>,
    disabled: Vec<String>,
}

impl Pipeline {
    /// The default optimisation pipeline ([`DEFAULT_STAGES`]).
    pub fn default_pipeline() -> Pipeline {
        Pipeline {
            stages: DEFAULT_STAGES
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|n| make_pass(n).expect("every pass name is known"))
                        .collect()
                })
                .collect(),
            disabled: Vec::new(),
        }
    }

    /// One stage of the named passes, in the given order; `None` if a name is unknown.
    pub fn of(names: &[&str]) -> Option<Pipeline> {
        let passes = names
            .iter()
            .map(|n| make_pass(n))
            .collect::<Option<Vec<_>>>()?;
        Some(Pipeline {
            stages: vec![passes],
            disabled: Vec::new(),
        })
    }

    /// Skips the named passes.
    pub fn disable(mut self, names: &[String]) -> Pipeline {
        self.disabled.extend(names.iter().cloned());
        self
    }

    /// Runs each stage to a fixed point; `observe(step, pass, module)` sees the module after
    /// each pass that changed it.
    pub fn run(
        &self,
        m: &mut Module,
        observe: &mut dyn FnMut(usize, &str, &Module),
    ) -> Result<Vec<PassRecord>, PipelineError> {
        let mut records = Vec::new();
        let mut step = 0;
        for stage in &self.stages {
            let mut settled = false;
            for round in 0..MAX_FIXED_POINT_ROUNDS {
                let mut any = false;
                for p in stage {
                    if self.disabled.iter().any(|d| d == p.name()) {
                        continue;
                    }
                    let t = Instant::now();
                    let changed = p.run(m);
                    let time = t.elapsed();
                    records.push(PassRecord {
                        name: p.name(),
                        round,
                        changed,
                        time,
                        log: p.take_log(),
                    });
                    if changed {
                        verify(m).map_err(|error| PipelineError::Verify {
                            pass: p.name().to_string(),
                            error,
                        })?;
                        step += 1;
                        observe(step, p.name(), m);
                        any = true;
                    }
                }
                if !any {
                    settled = true;
                    break;
                }
            }
            if !settled {
                return Err(PipelineError::NoFixedPoint(MAX_FIXED_POINT_ROUNDS));
            }
        }
        Ok(records)
    }
}

/// A per-pass timing table (for `--time-passes`).
pub fn timing_report(records: &[PassRecord]) -> String {
    let mut rows: Vec<(&str, Duration, usize, usize)> = Vec::new();
    for r in records {
        match rows.iter_mut().find(|x| x.0 == r.name) {
            Some(row) => {
                row.1 += r.time;
                row.2 += 1;
                row.3 += usize::from(r.changed);
            }
            None => rows.push((r.name, r.time, 1, usize::from(r.changed))),
        }
    }
    let total: Duration = rows.iter().map(|r| r.1).sum();
    let mut s = format!(
        "{:<22} {:>10} {:>5} {:>8}\n",
        "pass", "time", "runs", "changed"
    );
    for (name, time, runs, changed) in rows {
        s.push_str(&format!(
            "{name:<22} {:>8.3}ms {runs:>5} {changed:>8}\n",
            time.as_secs_f64() * 1e3
        ));
    }
    s.push_str(&format!(
        "{:<22} {:>8.3}ms\n",
        "total",
        total.as_secs_f64() * 1e3
    ));
    s
}
