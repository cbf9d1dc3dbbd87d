//! The HLO verifier: every invariant a pass or backend may rely on.
//!
//! Invariants checked, in order, for the entry computation:
//! 1. The module name is a C identifier; instruction names are unique and non-empty.
//! 2. Operands refer to earlier instructions (so the order is topological and acyclic).
//! 3. Every dtype is one the compiler supports end to end (`pred`, `i32`, `f32`).
//! 4. Each layout is a permutation of `0..rank`; element counts fit `MAX_ELEMENTS`;
//!    ranks fit `limits::MAX_RANK`.
//! 5. Parameters: indices are exactly `0..n`, each once, no operands.
//! 6. Constants: literal dtype/dims equal the instruction's shape and the data length fits.
//! 7. The declared shape equals the shape inferred from the op's typing rule
//!    (`shape_inference.rs`), broadcast and reshape included (their result dims are declared).
//! 8. Outputs: at least one, names unique C-identifier-like, values in range.
//!
//! A failure is a compiler bug (or bad hand-written HLO): the message names the failing
//! instruction in its text form, so it can be pasted into a test.

use super::inst::Computation;
use super::inst::{FusionKind, Instruction, Op};
use super::module::Module;
use super::print::{PrintOptions, print_instruction};
use super::shape::{DType, Shape, checked_element_count};
use super::shape_inference::{check_broadcast, check_reshape, infer_shape};
use std::collections::HashSet;
use thiserror::Error;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("HLO verifier: {message}\n  in: {instruction}")]
pub struct VerifyError {
    /// Which invariant failed.
    pub message: String,
    /// The failing instruction as HLO text (or the module header / ROOT line).
    pub instruction: String,
}

/// Checks every invariant listed in the module docs.
pub fn verify(m: &Module) -> Result<(), VerifyError> {
    if !is_c_identifier(&m.name) {
        return Err(VerifyError {
            message: format!("module name `{}` is not a C identifier", m.name),
            instruction: format!("HloModule {}", m.name),
        });
    }
    verify_api(m)?;
    let mut computation_names = HashSet::new();
    verify_computation(&m.entry, &mut computation_names)
}

/// The API dtypes: at most one per parameter and output, each a pair `ir/api.rs` converts.
fn verify_api(m: &Module) -> Result<(), VerifyError> {
    let c = &m.entry;
    let params = c.parameters();
    let fail = |message: String| VerifyError {
        message,
        instruction: format!("HloModule {}, api_types=...", m.name),
    };
    if m.api.inputs.len() > params.len() || m.api.outputs.len() > c.outputs.len() {
        return Err(fail(format!(
            "api_types lists {} inputs and {} outputs; the entry has {} and {}",
            m.api.inputs.len(),
            m.api.outputs.len(),
            params.len(),
            c.outputs.len()
        )));
    }
    let ins = params
        .iter()
        .enumerate()
        .map(|(k, &p)| (m.api.input(k), p, true));
    let outs = (c.outputs.iter().enumerate()).map(|(k, o)| (m.api.output(k), o.value, false));
    for (api, v, input) in ins.chain(outs) {
        let ir = c.inst(v).shape.dtype;
        let passes = |a: DType| {
            crate::ir::api_types::allowed(a, ir)
                && !(input && crate::ir::api_types::output_bytes(a, ir))
        };
        if let Some(a) = api.filter(|&a| !passes(a)) {
            return Err(fail(format!(
                "`%{}` is {ir} and cannot be passed as {a} at the C API",
                c.inst(v).name
            )));
        }
    }
    Ok(())
}

/// Checks one computation (and, recursively, the computations its fusions call).
fn verify_computation<'a>(
    c: &'a Computation,
    computation_names: &mut HashSet<&'a str>,
) -> Result<(), VerifyError> {
    if !computation_names.insert(c.name.as_str()) {
        return Err(VerifyError {
            message: format!("computation name `%{}` is used twice", c.name),
            instruction: format!("%{} {{", c.name),
        });
    }
    let opts = PrintOptions::readable();
    let mut names = HashSet::new();
    let mut params = Vec::new();
    for (i, inst) in c.instructions.iter().enumerate() {
        let fail = |message: String| VerifyError {
            message,
            instruction: print_instruction(c, inst, &opts),
        };
        if inst.name.is_empty() || !names.insert(inst.name.as_str()) {
            return Err(fail(format!(
                "instruction name `{}` is empty or not unique",
                inst.name
            )));
        }
        if let Some(&bad) = inst.operands.iter().find(|o| o.index() >= i) {
            return Err(fail(format!(
                "operand {} is not defined before its use (instruction #{})",
                bad, i
            )));
        }
        if !inst.shape.dtype.is_supported() {
            return Err(fail(format!(
                "dtype {} is not supported yet",
                inst.shape.dtype
            )));
        }
        if !inst.shape.layout.is_valid_for_rank(inst.shape.rank()) {
            return Err(fail("layout is not a permutation of the dims".into()));
        }
        if checked_element_count(&inst.shape.dims).is_none() {
            return Err(fail("element count overflows".into()));
        }
        if let Err(e) = super::shape::check_rank(&inst.shape.dims) {
            return Err(fail(e));
        }
        let operand_shapes: Vec<&Shape> = inst.operands.iter().map(|&o| &c.inst(o).shape).collect();
        let expected = match &inst.op {
            Op::Parameter { index } => {
                if !inst.operands.is_empty() {
                    return Err(fail("parameter takes no operands".into()));
                }
                params.push(*index);
                continue;
            }
            Op::Constant(lit) => {
                if !inst.operands.is_empty() || !lit.is_well_formed() {
                    return Err(fail(
                        "constant data does not match its dtype and dims".into(),
                    ));
                }
                infer_shape(&inst.op, &operand_shapes)
            }
            Op::Broadcast { dimensions } => {
                if operand_shapes.len() != 1 {
                    return Err(fail("broadcast takes 1 operand".into()));
                }
                check_broadcast(dimensions, operand_shapes[0], &inst.shape.dims)
                    .map(|_| Shape::new(operand_shapes[0].dtype, inst.shape.dims.clone()))
            }
            Op::Reshape => {
                if operand_shapes.len() != 1 {
                    return Err(fail("reshape takes 1 operand".into()));
                }
                check_reshape(operand_shapes[0], &inst.shape.dims)
                    .map(|_| Shape::new(operand_shapes[0].dtype, inst.shape.dims.clone()))
            }
            Op::Fusion { computation, .. } => {
                verify_computation(computation, computation_names).map_err(|e| VerifyError {
                    message: format!("in fused computation %{}: {}", computation.name, e.message),
                    instruction: e.instruction,
                })?;
                if computation
                    .instructions
                    .iter()
                    .any(|i| matches!(i.op, Op::Fusion { .. }))
                {
                    return Err(fail("a fused computation may not contain fusions".into()));
                }
                if let Op::Fusion {
                    kind: FusionKind::Output,
                    ..
                } = &inst.op
                {
                    let heavy: Vec<&Instruction> = computation
                        .instructions
                        .iter()
                        .filter(|i| matches!(i.op, Op::Dot(_) | Op::Convolution { .. }))
                        .collect();
                    let root_layout = &computation.inst(computation.outputs[0].value).shape.layout;
                    let ok = heavy.len() == 1
                        && heavy[0].operands.iter().all(|&o| {
                            let x = crate::ir::shuffle::conv_input(computation, o).0;
                            matches!(computation.inst(x).op, Op::Parameter { .. })
                        })
                        && heavy[0].shape.layout == *root_layout;
                    if !ok {
                        return Err(fail(
                            "an output fusion holds exactly one dot or convolution, whose operands are parameters (or a parameter through a channel shuffle or slice) and whose layout is the result's".into(),
                        ));
                    }
                }
                infer_shape(&inst.op, &operand_shapes)
            }
            _ => infer_shape(&inst.op, &operand_shapes),
        };
        let expected = expected.map_err(fail)?;
        if !expected.same_type(&inst.shape) {
            return Err(fail(format!(
                "declared shape {} differs from the inferred shape {}",
                inst.shape, expected
            )));
        }
    }
    params.sort();
    if params.iter().enumerate().any(|(i, &p)| i != p) {
        return Err(VerifyError {
            message: format!(
                "parameter indices {:?} are not exactly 0..{}",
                params,
                params.len()
            ),
            instruction: format!("%{}", c.name),
        });
    }
    let root = || format!("ROOT of %{}", c.name);
    if c.outputs.is_empty() {
        return Err(VerifyError {
            message: "the computation has no outputs".into(),
            instruction: root(),
        });
    }
    let mut out_names = HashSet::new();
    for o in &c.outputs {
        if o.value.index() >= c.instructions.len() {
            return Err(VerifyError {
                message: format!("output `{}` refers to a missing instruction", o.name),
                instruction: root(),
            });
        }
        if o.name.is_empty() || !out_names.insert(o.name.as_str()) {
            return Err(VerifyError {
                message: format!("output name `{}` is empty or not unique", o.name),
                instruction: root(),
            });
        }
    }
    Ok(())
}

pub use crate::util::c_name::is_c_identifier;
