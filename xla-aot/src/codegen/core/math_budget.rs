//! A module-wide budget of inlined math calls, so that LLVM's time stays linear in the model.
//!
//! Contract: [`bound_inlined_math`] runs on a module before the optimisation pipeline. The math
//! functions of `math.rs` are always inlined, and each inlined call is then vectorised with a
//! scalar remainder copy: about 120 lines of optimised IR and 2–4 ms of LLVM time per `tanh`.
//! The first [`MAX_INLINED_MATH_CALLS`] calls, in module order (kernels in execution order), stay
//! as they are; every later call is redirected to an out-of-line copy of the same function
//! (`xla_aot.tanh.outlined`, `noinline`), which LLVM compiles once. The results are bitwise the
//! same (the same function is called); the kernels past the budget run their math unvectorised.
//! A module under the budget is not touched at all, so its object is unchanged.

use crate::limits::MAX_INLINED_MATH_CALLS;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::module::{Linkage, Module};
use inkwell::values::{AnyValue, AsValueRef, FunctionValue, InstructionOpcode};
use inkwell::values::{BasicValueEnum, InstructionValue};
use std::collections::HashMap;

/// Whether `f` is one of the always-inline math functions of `math.rs`.
fn is_math(f: FunctionValue<'_>) -> bool {
    let name = f.get_name().to_string_lossy();
    name.starts_with("xla_aot.") && !name.ends_with(".outlined")
}

/// Every call to a math function from outside the math functions, in module order, with its
/// callee.
fn math_calls<'ctx>(m: &Module<'ctx>) -> Vec<(InstructionValue<'ctx>, FunctionValue<'ctx>)> {
    let math: HashMap<_, FunctionValue<'ctx>> = m
        .get_functions()
        .filter(|&f| is_math(f))
        .map(|f| (f.as_value_ref(), f))
        .collect();
    let mut calls = Vec::new();
    if math.is_empty() {
        return calls;
    }
    for f in m.get_functions().filter(|&f| !is_math(f)) {
        for bb in f.get_basic_blocks() {
            let mut inst = bb.get_first_instruction();
            while let Some(i) = inst {
                if i.get_opcode() == InstructionOpcode::Call {
                    // The callee is a call's last operand.
                    let callee = i
                        .get_operand(i.get_num_operands().saturating_sub(1))
                        .and_then(|o| o.value())
                        .and_then(|v: BasicValueEnum<'ctx>| math.get(&v.as_value_ref()).copied());
                    if let Some(callee) = callee {
                        calls.push((i, callee));
                    }
                }
                inst = i.get_next_instruction();
            }
        }
    }
    calls
}

/// The `noinline` copy of math function `f`: a wrapper that calls (and so inlines, once) `f`.
fn outlined<'ctx>(m: &Module<'ctx>, f: FunctionValue<'ctx>) -> FunctionValue<'ctx> {
    let name = format!("{}.outlined", f.get_name().to_string_lossy());
    if let Some(w) = m.get_function(&name) {
        return w;
    }
    let ctx = m.get_context();
    let w = m.add_function(&name, f.get_type(), Some(Linkage::Internal));
    for attr in ["noinline", "nounwind", "readnone", "willreturn"] {
        w.add_attribute(
            AttributeLoc::Function,
            ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(attr), 0),
        );
    }
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(w, "entry"));
    let args: Vec<BasicValueEnum<'ctx>> = w.get_param_iter().collect();
    let r = super::math::call_value(&b, f, &args);
    b.build_return(Some(&r)).expect("return");
    w
}

/// Redirects the math calls past [`MAX_INLINED_MATH_CALLS`] to out-of-line copies; returns how
/// many were redirected.
pub fn bound_inlined_math(m: &Module<'_>) -> usize {
    let calls = math_calls(m);
    let surplus = calls.len().saturating_sub(MAX_INLINED_MATH_CALLS);
    for &(call, callee) in &calls[calls.len() - surplus..] {
        let w = outlined(m, callee);
        let last = call.get_num_operands() - 1;
        let ok = call.set_operand(last, w.as_global_value().as_pointer_value());
        debug_assert!(ok, "{}", call.print_to_string());
    }
    surplus
}
