//! One-hot products as the gathers they are (an algebraic-simplifier rule).
//!
//! Contract: [`gather_of_one_hot`] replaces `dot(convert(ids == iota, f32), E)` — the lhs
//! `[M, V]` a one-hot of the i32 ids `[M]` (an exporter's Unsqueeze/Expand, Equal, Cast: a
//! compare, either way round, of a broadcast of the ids constant along `V` with a broadcast of
//! the constant `0, 1, …, V−1` along `V`), contracted with dim 0 of a constant f32 table `E`
//! `[V, N]` — by `select(0 ≤ id < V, gather(E, ids), +0)`. The result is bit for bit the
//! product's for every id, whatever its summation order: a dot's sums start from `+0` (the
//! interpreter's and every kernel's accumulators), a one-hot row adds one `1·E[id, n]` to
//! `0·E[v, n]` terms (zeros), and the rule applies only to finite tables without a `−0` entry,
//! so an in-range row sums to exactly `E[id, n]` (`+0` when it is zero), and an out-of-range
//! row (no one) to `+0`. A byte-sequence classifier's embedding (2,048 ids, 257
//! values, 64 wide: issue 46) becomes 2,048 row copies where it was a 67 MFLOP product.

use super::rewrite::Rewriter;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Instruction, Literal, Op, Shape};

/// The ids `[M]` (an i32 value of the new computation) that broadcast `b` (new id) spreads
/// along dim 1 of a `[M, V]` result: `b` maps a `[M]` or `[M, 1]` i32 operand to dims 0 (and 1).
fn ids_of(rw: &Rewriter, b: InstId, m: usize) -> Option<InstId> {
    let inst = rw.new_inst(b);
    let Op::Broadcast { dimensions } = &inst.op else {
        return None;
    };
    let s = &rw.new_inst(inst.operands[0]).shape;
    let along_rows = match (dimensions.as_slice(), s.dims.as_slice()) {
        ([0], [r]) => *r == m,
        ([0, 1], [r, 1]) => *r == m,
        _ => false,
    };
    (along_rows && s.dtype == DType::I32).then_some(inst.operands[0])
}

/// Whether broadcast `b` (new id) spreads the constant `0, 1, …, V−1` along dim 1.
fn is_iota_along_columns(rw: &Rewriter, b: InstId, v: usize) -> bool {
    let inst = rw.new_inst(b);
    let Op::Broadcast { dimensions } = &inst.op else {
        return false;
    };
    if dimensions.as_slice() != [1] {
        return false;
    }
    let Op::Constant(lit) = &rw.new_inst(inst.operands[0]).op else {
        return false;
    };
    lit.dtype == DType::I32
        && lit
            .to_i32_vec()
            .is_some_and(|x| x.len() == v && x.iter().enumerate().all(|(i, &e)| e as usize == i))
}

/// The gather replacing one-hot product `inst` (operands `ops`, new ids), built into `rw`
/// (module doc), or `None` where the rule does not apply.
pub fn gather_of_one_hot(rw: &mut Rewriter, inst: &Instruction, ops: &[InstId]) -> Option<InstId> {
    let Op::Dot(d) = &inst.op else {
        return None;
    };
    let plain = d.lhs_batch.is_empty()
        && d.rhs_batch.is_empty()
        && d.lhs_contracting.as_slice() == [1]
        && d.rhs_contracting.as_slice() == [0];
    let lhs = rw.new_inst(ops[0]).clone();
    if !plain || lhs.shape.rank() != 2 || inst.shape.dtype != DType::F32 {
        return None;
    }
    let (m, v) = (lhs.shape.dims[0], lhs.shape.dims[1]);
    let Op::Convert { to: DType::F32 } = lhs.op else {
        return None;
    };
    let cmp = rw.new_inst(lhs.operands[0]).clone();
    let Op::Compare(CompareDir::Eq) = cmp.op else {
        return None;
    };
    let (a, b) = (cmp.operands[0], cmp.operands[1]);
    let ids = match (ids_of(rw, a, m), ids_of(rw, b, m)) {
        (Some(ids), _) if is_iota_along_columns(rw, b, v) => ids,
        (_, Some(ids)) if is_iota_along_columns(rw, a, v) => ids,
        _ => return None,
    };
    let Op::Constant(table) = &rw.new_inst(ops[1]).op else {
        return None;
    };
    let e = table.to_f32_vec()?;
    if table.dtype != DType::F32
        || table.dims.len() != 2
        || table.dims[0] != v
        || e.iter()
            .any(|x| !x.is_finite() || x.to_bits() == (-0.0f32).to_bits())
    {
        return None;
    }
    let name = &inst.name;
    let i32s = |dims: Vec<usize>| Shape::new(DType::I32, dims);
    let push = |rw: &mut Rewriter, suffix: &str, op: Op, operands: Vec<InstId>, shape: Shape| {
        rw.push(Instruction {
            name: format!("{name}.{suffix}"),
            op,
            operands,
            shape,
        })
    };
    let ids = if rw.new_inst(ids).shape.rank() == 1 {
        ids
    } else {
        push(rw, "ids", Op::Reshape, vec![ids], i32s(vec![m]))
    };
    let table = ops[1];
    let rows = push(rw, "rows", Op::Gather, vec![table, ids], inst.shape.clone());
    // 0 ≤ id < V: the id equals itself clamped into [0, V − 1] (integer maximum and minimum).
    let bound = |rw: &mut Rewriter, suffix: &str, c: i32| {
        let k = rw.constant(&format!("{name}.{suffix}"), Literal::from_i32(vec![], &[c]));
        push(
            rw,
            &format!("{suffix}_b"),
            Op::Broadcast { dimensions: vec![] },
            vec![k],
            i32s(vec![m]),
        )
    };
    let (lo, hi) = (bound(rw, "lo", 0), bound(rw, "hi", v as i32 - 1));
    let below = push(
        rw,
        "below",
        Op::Binary(BinaryOp::Minimum),
        vec![ids, hi],
        i32s(vec![m]),
    );
    let clamped = push(
        rw,
        "clamped",
        Op::Binary(BinaryOp::Maximum),
        vec![below, lo],
        i32s(vec![m]),
    );
    let inside = push(
        rw,
        "inside",
        Op::Compare(CompareDir::Eq),
        vec![clamped, ids],
        Shape::new(DType::Pred, vec![m]),
    );
    let inside = push(
        rw,
        "inside_b",
        Op::Broadcast {
            dimensions: vec![0],
        },
        vec![inside],
        Shape::new(DType::Pred, inst.shape.dims.clone()),
    );
    let zero = rw.constant(&format!("{name}.zero"), Literal::scalar_f32(0.0));
    let zeros = push(
        rw,
        "zeros",
        Op::Broadcast { dimensions: vec![] },
        vec![zero],
        inst.shape.clone(),
    );
    Some(push(
        rw,
        "gathered",
        Op::Select,
        vec![inside, rows, zeros],
        inst.shape.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use crate::interp::evaluate;
    use crate::ir::{Literal, Op, parse_module};
    use crate::passes::Pass;
    use crate::passes::simplify::AlgebraicSimplifier;

    /// A one-hot of 5 ids over 3 values times a 3×2 table (`table` its 6 values).
    fn one_hot(table: &str) -> String {
        format!(
            "HloModule m\n\nENTRY %main {{\n  \
             %ids = i32[5]{{0}} parameter(0)\n  \
             %r = i32[5,1]{{1,0}} reshape(%ids)\n  \
             %iota = i32[3]{{0}} constant({{0, 1, 2}})\n  \
             %a = i32[5,3]{{1,0}} broadcast(%r), dimensions={{0,1}}\n  \
             %b = i32[5,3]{{1,0}} broadcast(%iota), dimensions={{1}}\n  \
             %eq = pred[5,3]{{1,0}} compare(%b, %a), direction=EQ\n  \
             %h = f32[5,3]{{1,0}} convert(%eq)\n  \
             %e = f32[3,2]{{1,0}} constant({{{table}}})\n  \
             %y = f32[5,2]{{1,0}} dot(%h, %e), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             ROOT %outputs = (f32[5,2]{{1,0}}) tuple(%y), names={{y}}\n}}\n"
        )
    }

    fn has_dot(m: &crate::ir::Module) -> bool {
        m.entry
            .instructions
            .iter()
            .any(|i| matches!(i.op, Op::Dot(_)))
    }

    #[test]
    fn a_one_hot_product_becomes_a_gather_with_the_same_bits() {
        let text = one_hot("1, -2, 0, -5, 3, -4");
        let before = parse_module(&text).unwrap();
        let mut after = before.clone();
        assert!(AlgebraicSimplifier.run(&mut after));
        assert!(!has_dot(&after), "the dot is gone");
        // In range, out of range on both sides, the last value.
        let ids = [Literal::from_i32(vec![5], &[0, 2, -1, 3, 1])];
        let (want, got) = (
            evaluate(&before, &ids).unwrap(),
            evaluate(&after, &ids).unwrap(),
        );
        let bits = |l: &Literal| -> Vec<u32> {
            l.to_f32_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(&got[0]), bits(&want[0]));
        assert_eq!(got[0].to_f32_vec().unwrap()[2..6], [3.0, -4.0, 0.0, 0.0]);
    }

    #[test]
    fn a_table_with_a_negative_zero_or_an_infinity_keeps_its_product() {
        for table in ["1, -2, -0.0, -5, 3, -4", "1, -2, inf, -5, 3, -4"] {
            let mut m = parse_module(&one_hot(table)).unwrap();
            AlgebraicSimplifier.run(&mut m);
            assert!(has_dot(&m), "{table}");
        }
    }
}
