//! QDQ → QOperator: the node groups of a QDQ model that onnxruntime runs as one integer kernel
//! (`DequantizeLinear` of the input and of constant weights → `Conv` / `MatMul` / `Gemm` → its
//! only consumer a `QuantizeLinear`) become one `QLinearConv` / `QLinearMatMul` /
//! `com.microsoft` `QGemm` node before lowering,
//! so they compute as onnxruntime's integer kernels do (`quant.rs`' exact path) instead of
//! dequantized f32 math whose roundings can land a step away.
//!
//! Contract: a group (uint8 or int8 activations, as onnxruntime fuses them where it allows int8:
//! on Arm, or with `session.qdqisint8allowed=1`; see `fuse`) is fused only when the result is
//! the same computation up to rounding: the weights, every scale and zero point are
//! initializers, the input and output scales are per tensor, the weight scale per tensor or per output channel (axis 0 of a convolution's
//! weights and of a `transB` Gemm's, the last axis of a product's), a Gemm has `alpha` = `beta`
//! = 1 and no `transA`, a bias is the int32 dequantization whose scale is
//! `x_scale · w_scale` (what the quantizer writes), and the float result feeds nothing but the
//! `QuantizeLinear` (nor is a graph output). The fused node takes the `QuantizeLinear`'s place in
//! the node list (every input it reads is defined by then) and the product node is dropped; the
//! `DequantizeLinear` nodes stay (other consumers may read them; unused ones are dead code).
//! Two forms of PyTorch's QAT exports fuse too, as onnxruntime fuses them: weights quantized in
//! the graph (a `QuantizeLinear` of initializers, folded at import) and a float bias, quantized
//! to an int32 `Constant` placed before the fused node (onnxruntime's WeightBiasQuantization).
//! `Add` and `Mul` between two per-tensor dequantizations (`AveragePool` and `Softmax` after one)
//! and one per-tensor requantization of one 8-bit type become `com.microsoft` `QLinearAdd` /
//! `QLinearMul` / `QLinearAveragePool` / `QLinearSoftmax` (onnxruntime's roundings,
//! `qlinear_exact.rs`).
//! Likewise a value-moving op ([`MOVES`]) between dequantizations and one requantization, all at
//! one per-tensor scale and zero point of one type, runs on the quantized integers instead (the
//! same values: a dequantize/quantize round trip at one scale is exact).

use super::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, attribute_type as at};
use super::rewrite::attr_i;
use std::collections::{HashMap, HashSet};

/// Ops that only move values: between a DequantizeLinear and a QuantizeLinear with one scale and
/// zero point they run on the quantized integers (MaxPool picks one of them; none computes).
const MOVES: &[&str] = &[
    "Concat",
    "MaxPool",
    "Reshape",
    "Transpose",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
];

/// The graph's nodes with the fusible QDQ groups fused (a copy only when one is), for a model of
/// default-domain `opset`. `konst` gives
/// an initializer's values: the importer has already taken the data of large ones out of their
/// `TensorProto`s (`ConstTensor::from_proto_owned`), whose names, dims and types stay.
pub fn fuse(
    graph: &GraphProto,
    konst: &dyn Fn(&str) -> Option<Vec<f64>>,
    opset: i64,
) -> Option<Vec<NodeProto>> {
    let inits: HashMap<&str, &TensorProto> = graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let producer: HashMap<&str, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect();
    // Every node reading a value, once per input that names it, in node order.
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in graph.node.iter().enumerate() {
        for s in &n.input {
            readers.entry(s.as_str()).or_default().push(i);
        }
    }
    let outputs: HashSet<&str> = graph.output.iter().map(|o| o.name.as_str()).collect();

    let is_init = |name: &str| name.is_empty() || inits.contains_key(name);
    let count = |name: &str| -> Option<usize> {
        let t = inits.get(name)?;
        Some(t.dims.iter().product::<i64>().max(1) as usize)
    };
    // A weight quantized in the graph (onnxruntime's `AddQDQPairToWeight`, PyTorch's QAT
    // exports): a QuantizeLinear of initializers, which the importer folds to an integer
    // constant before any node reads it. The dims of the integer tensor are its input's.
    let const_quantize = |name: &str| -> Option<&TensorProto> {
        let n = &graph.node[*producer.get(name)?];
        let ok = n.op_type == "QuantizeLinear"
            && (n.domain.is_empty() || n.domain == "com.microsoft")
            && n.input.len() == 3
            && n.input
                .iter()
                .all(|s| !s.is_empty() && inits.contains_key(s.as_str()));
        if ok {
            inits.get(n.input[0].as_str()).copied()
        } else {
            None
        }
    };
    let values = |name: &str| -> Option<Vec<f64>> {
        inits.get(name)?;
        konst(name)
    };
    // A DequantizeLinear producing `name`, with its inputs and axis.
    let dq = |name: &str| -> Option<(&NodeProto, i64)> {
        let n = &graph.node[*producer.get(name)?];
        let is_dq = n.op_type == "DequantizeLinear"
            && (n.domain.is_empty() || n.domain == "com.microsoft")
            && n.input.len() >= 2;
        is_dq.then(|| (n, int_attr(n, "axis").unwrap_or(1)))
    };
    // The nodes that take a node's place: a fused group, after the constants it reads.
    // The QuantizeLinear nodes that read `out`, when nothing else does (nor is it a graph
    // output) and all of them quantize alike (the same scale and zero point, as values, and
    // attributes): the first, whose place a fused group takes, and the others, which become
    // its copies. onnxruntime's `DedicatedQDQPair` gives every consumer its own pair; most
    // models have one.
    let quantizers = |out: &str| -> Option<(usize, Vec<usize>)> {
        let qs = readers.get(out).filter(|_| !outputs.contains(out))?;
        let first = &graph.node[qs[0]];
        let alike = |a: &String, b: &String| {
            a == b
                || (inits.get(a.as_str()).map(|t| t.data_type)
                    == inits.get(b.as_str()).map(|t| t.data_type)
                    && values(a).is_some_and(|v| Some(v) == values(b)))
        };
        let same = qs.iter().all(|&j| {
            let q = &graph.node[j];
            q.op_type == "QuantizeLinear"
                && q.domain == first.domain
                && q.attribute == first.attribute
                && q.input.len() == first.input.len()
                && q.input.first().map(String::as_str) == Some(out)
                && q.input[1..].iter().all(|s| s != out)
                && q.input[1..]
                    .iter()
                    .zip(&first.input[1..])
                    .all(|(a, b)| alike(a, b))
        });
        let mut rest = qs[1..].to_vec();
        rest.dedup();
        (same && !rest.contains(&qs[0])).then(|| (qs[0], rest))
    };
    let mut fused: HashMap<usize, Vec<NodeProto>> = HashMap::new();
    let mut dropped: HashSet<usize> = HashSet::new();
    for (i, n) in graph.node.iter().enumerate() {
        let kind = match n.op_type.as_str() {
            "Conv" if n.domain.is_empty() && (2..=3).contains(&n.input.len()) => Product::Conv,
            "MatMul" if n.domain.is_empty() && n.input.len() == 2 => Product::MatMul,
            // QGemm computes alpha · A·B' + C with C at scale a_scale · b_scale: a Gemm with
            // beta = 1 (its C is that bias), alpha = 1 and A not transposed.
            "Gemm"
                if n.domain.is_empty()
                    && (2..=3).contains(&n.input.len())
                    && float_attr(n, "alpha").unwrap_or(1.0) == 1.0
                    && float_attr(n, "beta").unwrap_or(1.0) == 1.0
                    && int_attr(n, "transA").unwrap_or(0) == 0 =>
            {
                Product::Gemm {
                    trans_b: int_attr(n, "transB").unwrap_or(0) != 0,
                }
            }
            _ => continue,
        };
        let Some(out) = n.output.first().map(String::as_str) else {
            continue;
        };
        let Some((qi, twins)) = quantizers(out) else {
            continue;
        };
        if twins.iter().any(|t| fused.contains_key(t)) {
            continue;
        }
        let q = &graph.node[qi];
        let q_ok = q.op_type == "QuantizeLinear"
            && (q.domain.is_empty() || q.domain == "com.microsoft")
            && q.input.first().map(String::as_str) == Some(out)
            && q.input.len() == 3
            && is_init(&q.input[1])
            && is_init(&q.input[2])
            && count(&q.input[1]) == Some(1)
            && int_attr(q, "block_size").unwrap_or(0) == 0;
        let (Some((dx, _)), Some((dw, w_axis))) = (dq(&n.input[0]), dq(&n.input[1])) else {
            continue;
        };
        let x_ok = dx.input[1..].iter().all(|s| is_init(s))
            && count(&dx.input[1]) == Some(1)
            && dx
                .input
                .get(2)
                .is_none_or(|z| z.is_empty() || count(z) == Some(1));
        let w_rank = inits
            .get(dw.input[0].as_str())
            .copied()
            .or_else(|| const_quantize(&dw.input[0]))
            .map(|t| t.dims.len() as i64);
        let w_axis_ok = match (w_rank, count(&dw.input[1])) {
            (Some(_), Some(1)) => true,
            (Some(r), Some(_)) => {
                let a = if w_axis < 0 { w_axis + r } else { w_axis };
                // The output-channel axis: 0 of a convolution's and a transposed Gemm operand's
                // weights, else the last.
                a == match kind {
                    Product::Conv | Product::Gemm { trans_b: true } => 0,
                    _ => r - 1,
                }
            }
            _ => false,
        };
        let w_ok = (is_init(&dw.input[0]) || const_quantize(&dw.input[0]).is_some())
            && dw.input[1..].iter().all(|s| is_init(s))
            && w_axis_ok;
        // 8-bit activations, unsigned or signed, as onnxruntime's integer kernels take them
        // (QLinearConv, QLinearMatMul). On x86-64 onnxruntime by default fuses only uint8 ones
        // and keeps an int8-activation group in float (dequantize → Conv → quantize, MLAS's f32
        // sums, outputs up to 7 steps away on the light architectures); with
        // `session.qdqisint8allowed=1` (its default on Arm) it fuses both, and the nine light
        // architectures quantized with int8 activations then match it exactly (2026-12-04,
        // `bench/onnx_vs_ort.py --ort-config`), running 2–4× faster than its float path.
        let byte_acts = |node: &NodeProto| {
            node.input.get(2).is_none_or(|z| {
                z.is_empty()
                    || inits.get(z.as_str()).is_some_and(|t| {
                        t.data_type == super::proto::data_type::UINT8
                            || t.data_type == super::proto::data_type::INT8
                    })
            })
        };
        let acts_ok = byte_acts(dx) && byte_acts(q);
        if !(q_ok && x_ok && w_ok && acts_ok && int_attr(dw, "block_size").unwrap_or(0) == 0) {
            continue;
        }
        let zero = |node: &NodeProto| node.input.get(2).cloned().unwrap_or_default();
        let mut inputs = vec![
            dx.input[0].clone(),
            dx.input[1].clone(),
            zero(dx),
            dw.input[0].clone(),
            dw.input[1].clone(),
            zero(dw),
            q.input[1].clone(),
            q.input[2].clone(),
        ];
        let has_bias = n.input.len() == 3 && !n.input[2].is_empty();
        let mut prelude = None;
        if kind != Product::MatMul && has_bias && dq(&n.input[2]).is_none() {
            // A float bias (onnxruntime's `QuantizeBias: False`, PyTorch's QAT exports):
            // quantized as onnxruntime's WeightBiasQuantization does, into a constant.
            let (Some(xs), Some(ws)) = (values(&dx.input[1]), values(&dw.input[1])) else {
                continue;
            };
            let Some(bias) = float_bias(&n.input[2], &xs, &ws, &inits, &values, &producer) else {
                continue;
            };
            inputs.push(bias.output[0].clone());
            prelude = Some(bias);
        } else if kind != Product::MatMul && has_bias {
            // The bias must be the int32 dequantization at scale x_scale · w_scale.
            let Some((db, _)) = dq(&n.input[2]) else {
                continue;
            };
            let (Some(xs), Some(ws), Some(bs)) = (
                values(&dx.input[1]),
                values(&dw.input[1]),
                values(&db.input[1]),
            ) else {
                continue;
            };
            let same = bs.len() == ws.len()
                && bs
                    .iter()
                    .zip(&ws)
                    .all(|(&b, &w)| b as f32 == xs[0] as f32 * w as f32);
            let b_zero = db.input.get(2).is_none_or(|z| {
                z.is_empty() || values(z).is_some_and(|v| v.iter().all(|&x| x == 0.0))
            });
            let int32 = inits
                .get(db.input[0].as_str())
                .is_some_and(|t| t.data_type == super::proto::data_type::INT32);
            if !(same && b_zero && int32) {
                continue;
            }
            inputs.push(db.input[0].clone());
        }
        let (op_type, domain, attribute) = match kind {
            Product::Conv => ("QLinearConv", "", n.attribute.clone()),
            Product::MatMul => ("QLinearMatMul", "", Vec::new()),
            Product::Gemm { trans_b } => {
                // QGemm's inputs: A's, B's triples, C, y_scale, y_zero_point.
                let bias = if has_bias {
                    inputs.pop().expect("the bias was pushed")
                } else {
                    String::new()
                };
                inputs.insert(6, bias);
                let t = attr_i("transB", trans_b as i64);
                ("QGemm", "com.microsoft", vec![t])
            }
        };
        let node = group_node(n, q, op_type, domain, inputs, attribute);
        copies(&mut fused, &graph.node, &q.output[0], &twins);
        fused.insert(qi, prelude.into_iter().chain([node]).collect());
        dropped.insert(i);
    }
    // DequantizeLinear (two of them for Add/Mul) → Add/Mul/AveragePool → QuantizeLinear, all
    // per tensor with constant scales and zero points of one 8-bit type: onnxruntime runs the
    // group as QLinearAdd/QLinearMul/QLinearAveragePool, whose roundings `qlinear_exact.rs`
    // reproduces.
    for (i, n) in graph.node.iter().enumerate() {
        let (op_type, arity) = match n.op_type.as_str() {
            "Add" => ("QLinearAdd", 2),
            "Mul" => ("QLinearMul", 2),
            "AveragePool" => ("QLinearAveragePool", 1),
            "Softmax" => ("QLinearSoftmax", 1),
            _ => continue,
        };
        if !n.domain.is_empty() || n.input.len() != arity || n.output.len() != 1 {
            continue;
        }
        let out = n.output[0].as_str();
        let Some((qi, twins)) = quantizers(out) else {
            continue;
        };
        if twins.iter().any(|t| fused.contains_key(t)) {
            continue;
        }
        let q = &graph.node[qi];
        let per_tensor = |node: &NodeProto| -> Option<i32> {
            let (s, z) = (node.input.get(1)?, node.input.get(2)?);
            let ty = inits.get(z.as_str())?.data_type;
            let byte = ty == super::proto::data_type::UINT8 || ty == super::proto::data_type::INT8;
            (node.input.len() == 3
                && is_init(s)
                && count(s) == Some(1)
                && count(z) == Some(1)
                && int_attr(node, "block_size").unwrap_or(0) == 0
                && byte)
                .then_some(ty)
        };
        let q_ok = q.op_type == "QuantizeLinear"
            && (q.domain.is_empty() || q.domain == "com.microsoft")
            && q.input.first().map(String::as_str) == Some(out)
            && !fused.contains_key(&qi);
        let Some(dqs) = n
            .input
            .iter()
            .map(|x| dq(x).map(|d| d.0))
            .collect::<Option<Vec<&NodeProto>>>()
        else {
            continue;
        };
        let mut types = dqs.iter().map(|d| per_tensor(d));
        let t0 = per_tensor(q);
        // int8 Mul groups too: onnxruntime fuses them into QLinearMul where it allows int8
        // activations (by default on Arm; `session.qdqisint8allowed` elsewhere) and keeps them
        // in float on x86-64 by default, as it keeps its int8-activation convolutions (see
        // `fuse`); the references in `scripts/onnx_quantized.py` are its integer kernels.
        if !q_ok || t0.is_none() || !types.all(|t| t == t0) {
            continue;
        }
        let inputs = dqs
            .iter()
            .flat_map(|d| d.input[..3].iter().cloned())
            .chain(q.input[1..3].iter().cloned())
            .collect();
        // QLinearAveragePool takes AveragePool's attributes (and channels_last = 0);
        // QLinearSoftmax an explicit axis and the model's opset (its axis default and 2-D
        // coercion before 13).
        let attribute = if n.op_type == "Softmax" {
            let axis = int_attr(n, "axis").unwrap_or(if opset < 13 { 1 } else { -1 });
            vec![attr_i("axis", axis), attr_i("opset", opset)]
        } else {
            n.attribute.clone()
        };
        let node = group_node(n, q, op_type, "com.microsoft", inputs, attribute);
        copies(&mut fused, &graph.node, &q.output[0], &twins);
        fused.insert(qi, vec![node]);
        dropped.insert(i);
    }
    // Data movement between a dequantization and a requantization at the same scale and zero
    // point moves the quantized integers themselves (onnxruntime drops such Q/DQ pairs too).
    for (i, n) in graph.node.iter().enumerate() {
        if !n.domain.is_empty() || !MOVES.contains(&n.op_type.as_str()) || dropped.contains(&i) {
            continue;
        }
        let Some(out) = n.output.first().map(String::as_str) else {
            continue;
        };
        if n.output.len() != 1 {
            continue;
        }
        let Some((qi, twins)) = quantizers(out) else {
            continue;
        };
        if twins.iter().any(|t| fused.contains_key(t)) {
            continue;
        }
        let q = &graph.node[qi];
        if q.op_type != "QuantizeLinear" || q.input.len() != 3 || fused.contains_key(&qi) {
            continue;
        }
        let key = |s: &str, z: &str| -> Option<(Vec<u64>, Vec<u64>, i32)> {
            let zt = inits.get(z)?;
            let sv = values(s)?;
            let zv = values(z)?;
            (sv.len() == 1 && zv.len() == 1).then(|| {
                (
                    sv.iter().map(|v| v.to_bits()).collect(),
                    zv.iter().map(|v| v.to_bits()).collect(),
                    zt.data_type,
                )
            })
        };
        let Some(want) = key(&q.input[1], &q.input[2]) else {
            continue;
        };
        // The data inputs (Concat: all; the others: input 0) must all be such dequantizations.
        let data = if n.op_type == "Concat" {
            n.input.len()
        } else {
            1
        };
        let mut ins = n.input.clone();
        let ok = (0..data).all(|j| {
            dq(&n.input[j]).is_some_and(|(d, _)| {
                d.input.len() == 3 && key(&d.input[1], &d.input[2]).as_ref() == Some(&want) && {
                    ins[j] = d.input[0].clone();
                    true
                }
            })
        });
        if !ok {
            continue;
        }
        let mut node = n.clone();
        node.input = ins;
        node.output = q.output.clone();
        copies(&mut fused, &graph.node, &q.output[0], &twins);
        fused.insert(qi, vec![node]);
        dropped.insert(i);
    }
    if fused.is_empty() {
        return None;
    }
    Some(
        graph
            .node
            .iter()
            .enumerate()
            .filter(|(i, _)| !dropped.contains(i))
            .flat_map(|(i, n)| fused.remove(&i).unwrap_or_else(|| vec![n.clone()]))
            .collect(),
    )
}

/// A `Constant` node holding float bias `name` quantized to int32 as onnxruntime's
/// WeightBiasQuantization does before its QDQ fusion (`round_half_even(f32(b) / f32(x_scale ·
/// w_scale))`, f32 arithmetic), so the fused group reads the integers onnxruntime's QLinearConv
/// does; `None` when `name` is not a 1-D float initializer matching the weight scales, a
/// quantized value leaves int32, or the constant's name is taken.
fn float_bias(
    name: &str,
    xs: &[f64],
    ws: &[f64],
    inits: &HashMap<&str, &TensorProto>,
    values: &dyn Fn(&str) -> Option<Vec<f64>>,
    producer: &HashMap<&str, usize>,
) -> Option<NodeProto> {
    use super::proto::data_type as dt;
    let t = inits.get(name)?;
    if t.data_type != dt::FLOAT || t.dims.len() != 1 || xs.len() != 1 {
        return None;
    }
    let b = values(name)?;
    if ws.len() != 1 && ws.len() != b.len() {
        return None;
    }
    let q = b
        .iter()
        .enumerate()
        .map(|(c, &v)| {
            let scale = xs[0] as f32 * ws[if ws.len() == 1 { 0 } else { c }] as f32;
            let r = (v as f32 / scale).round_ties_even();
            // i32::MAX is not an f32; 2^31 is the first value out of range.
            (r.is_finite() && r.abs() < 2147483648.0).then_some(r as i32)
        })
        .collect::<Option<Vec<i32>>>()?;
    let out = format!("{name}__int32");
    if inits.contains_key(out.as_str()) || producer.contains_key(out.as_str()) {
        return None;
    }
    let value = TensorProto {
        dims: vec![q.len() as i64],
        data_type: dt::INT32,
        int32_data: q,
        name: out.clone(),
        ..Default::default()
    };
    Some(NodeProto {
        output: vec![out],
        op_type: "Constant".into(),
        attribute: vec![AttributeProto {
            name: "value".into(),
            r#type: at::TENSOR,
            t: Some(value),
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// Each `QuantizeLinear` of `twins` (quantizing alike what a fused group's first one does)
/// becomes an `Identity` of that one's output `first`.
fn copies(
    fused: &mut HashMap<usize, Vec<NodeProto>>,
    nodes: &[NodeProto],
    first: &str,
    twins: &[usize],
) {
    for &t in twins {
        let q = &nodes[t];
        let copy = NodeProto {
            input: vec![first.to_string()],
            output: q.output.clone(),
            name: q.name.clone(),
            op_type: "Identity".into(),
            ..Default::default()
        };
        fused.insert(t, vec![copy]);
    }
}

/// The product a fusible group computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Product {
    Conv,
    MatMul,
    Gemm { trans_b: bool },
}

/// The node a fused group becomes: `op_type` of `domain` on `input`, writing the
/// `QuantizeLinear` `q`'s output, named after the group's op `n` (or `q` when `n` has no name).
fn group_node(
    n: &NodeProto,
    q: &NodeProto,
    op_type: &str,
    domain: &str,
    input: Vec<String>,
    attribute: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input,
        output: q.output.clone(),
        name: if n.name.is_empty() {
            q.name.clone()
        } else {
            n.name.clone()
        },
        op_type: op_type.into(),
        domain: domain.into(),
        attribute,
    }
}

/// A float attribute's value.
fn float_attr(n: &NodeProto, name: &str) -> Option<f32> {
    n.attribute
        .iter()
        .find(|a| a.name == name && a.r#type == at::FLOAT)
        .map(|a| a.f)
}

/// An integer attribute's value.
fn int_attr(n: &NodeProto, name: &str) -> Option<i64> {
    n.attribute
        .iter()
        .find(|a: &&AttributeProto| a.name == name && a.r#type == at::INT)
        .map(|a| a.i)
}

#[cfg(test)]
mod tests {
    use super::super::proto::{ValueInfoProto, data_type as dt};
    use super::super::tensor::ConstTensor;
    use super::*;

    fn init(name: &str, ty: i32, dims: &[i64], v: &[f64]) -> TensorProto {
        let (mut float_data, mut int32_data) = (Vec::new(), Vec::new());
        if ty == dt::FLOAT {
            float_data = v.iter().map(|&x| x as f32).collect();
        } else {
            int32_data = v.iter().map(|&x| x as i32).collect();
        }
        TensorProto {
            name: name.into(),
            data_type: ty,
            dims: dims.to_vec(),
            float_data,
            int32_data,
            ..Default::default()
        }
    }

    fn node(op: &str, ins: &[&str], out: &str) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: vec![out.into()],
            ..Default::default()
        }
    }

    /// A QDQ convolution whose output two QuantizeLinear nodes read, each with its own scale
    /// and zero point initializers (onnxruntime's `DedicatedQDQPair`), of output scale `s2`
    /// for the second.
    fn dedicated(s2: f64) -> GraphProto {
        let out = |n: &str| ValueInfoProto {
            name: n.into(),
            ..Default::default()
        };
        GraphProto {
            node: vec![
                node("DequantizeLinear", &["x", "xs", "xz"], "dx"),
                node("DequantizeLinear", &["w", "ws", "wz"], "dw"),
                node("Conv", &["dx", "dw"], "c"),
                node("QuantizeLinear", &["c", "ys", "yz"], "q1"),
                node("QuantizeLinear", &["c", "ys2", "yz2"], "q2"),
                node("DequantizeLinear", &["q1", "ys", "yz"], "d1"),
                node("DequantizeLinear", &["q2", "ys2", "yz2"], "d2"),
            ],
            initializer: vec![
                init("xs", dt::FLOAT, &[], &[0.5]),
                init("xz", dt::UINT8, &[], &[3.0]),
                init("w", dt::INT8, &[2, 1, 1, 1], &[1.0, -2.0]),
                init("ws", dt::FLOAT, &[], &[0.25]),
                init("wz", dt::INT8, &[], &[0.0]),
                init("ys", dt::FLOAT, &[], &[0.125]),
                init("yz", dt::UINT8, &[], &[7.0]),
                init("ys2", dt::FLOAT, &[], &[s2]),
                init("yz2", dt::UINT8, &[], &[7.0]),
            ],
            output: vec![out("d1"), out("d2")],
            ..Default::default()
        }
    }

    fn fused_ops(g: &GraphProto) -> Vec<String> {
        let konst = |name: &str| {
            let t = g.initializer.iter().find(|t| t.name == name)?;
            Some(ConstTensor::from_proto(t).ok()?.as_f64())
        };
        fuse(g, &konst, 13)
            .unwrap_or_else(|| g.node.clone())
            .iter()
            .map(|n| format!("{}({})->{}", n.op_type, n.input.join(","), n.output[0]))
            .collect()
    }

    #[test]
    fn dedicated_quantizers_of_one_product_fuse_as_one() {
        let ops = fused_ops(&dedicated(0.125));
        assert!(!ops.iter().any(|o| o.starts_with("Conv(")), "{ops:#?}");
        assert!(
            ops.iter()
                .any(|o| o.starts_with("QLinearConv(") && o.ends_with("->q1")),
            "{ops:#?}"
        );
        assert!(ops.contains(&"Identity(q1)->q2".to_string()), "{ops:#?}");
        // Another scale for the second: two different requantizations, left in float.
        let ops = fused_ops(&dedicated(0.25));
        assert!(ops.iter().any(|o| o.starts_with("Conv(")), "{ops:#?}");
    }
}
