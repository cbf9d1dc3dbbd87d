//! Floating-point operation counts: what benchmarks divide time by to report GFLOP/s.
//!
//! Contract: a multiply-add counts 2 (dot, convolution), every other arithmetic result counts 1
//! per element (a reduction 1 per input element, a windowed reduction 1 per tap), and data
//! movement (broadcast, reshape, transpose, slice, pad, concatenate, gather, convert) counts 0.
//! A fusion counts what its computation counts: fusion changes memory traffic, not arithmetic.

use super::{Computation, InstId, Op};

/// Flops of instruction `id` of `c`.
pub fn flops(c: &Computation, id: InstId) -> u64 {
    let inst = c.inst(id);
    let out = inst.shape.element_count() as u64;
    let operand = |j: usize| &c.inst(inst.operands[j]).shape;
    match &inst.op {
        Op::Dot(d) => {
            let k: u64 = d
                .lhs_contracting
                .iter()
                .map(|&i| operand(0).dims[i] as u64)
                .product();
            2 * out * k
        }
        Op::Convolution { window, .. } => {
            let taps: u64 = window.size.iter().map(|&s| s as u64).product();
            2 * out * operand(1).dims[1] as u64 * taps
        }
        Op::Reduce { .. } | Op::Argmax { .. } => operand(0).element_count() as u64,
        Op::ReduceWindow { window, .. } => {
            out * window.size.iter().map(|&s| s as u64).product::<u64>()
        }
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert { .. } => out,
        Op::Fma => 2 * out,
        // A 32×32 → 64-bit product, a rounding shift and a rounding divide.
        Op::MulQ31 => 4 * out,
        Op::Fusion { computation, .. } => computation.ids().map(|i| flops(computation, i)).sum(),
        _ => 0,
    }
}

/// Flops of one run of a computation.
pub fn total(c: &Computation) -> u64 {
    c.ids().map(|i| flops(c, i)).sum()
}

#[cfg(test)]
mod tests {
    use crate::front::spec_from_str;

    #[test]
    fn a_dense_layer_counts_two_per_multiply_add() {
        let spec = "name: d\ninputs:\n  - {name: x, dtype: f32, shape: [2, 3]}\noutputs: [y]\n\
                    ops:\n  - {name: y, op: matmul, inputs: [x, x], transpose_b: true}\n";
        let m = spec_from_str(std::path::Path::new("d.yaml"), spec)
            .unwrap()
            .module;
        // y = x · xᵀ: [2, 2] outputs, 3 multiply-adds each.
        assert_eq!(super::total(&m.entry), 2 * 4 * 3);
    }
}
