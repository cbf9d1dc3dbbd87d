//! Result shapes of every primitive, from its attributes and operand shapes.
//!
//! Contract: [`infer_shape`] is the single definition of each op's typing rule. The builder uses it
//! to compute result shapes, the verifier to check them. It returns a row-major shape, or a message
//! that says which rule was broken (the caller adds the instruction). It never panics, whatever the
//! attributes: the verifier runs it on parsed text, which can hold anything.

use super::inst::{DotDims, Op, Window};
use super::shape::{DType, Shape, checked_element_count, dims_str};

/// Computes the result shape of `op` applied to operands of shapes `operands`.
pub fn infer_shape(op: &Op, operands: &[&Shape]) -> Result<Shape, String> {
    if let Some(n) = op.arity() {
        if operands.len() != n {
            return Err(format!(
                "{} takes {} operand(s), got {}",
                op.opcode(),
                n,
                operands.len()
            ));
        }
    }
    let shape = match op {
        Op::Parameter { .. } => return Err("parameter shapes are declared, not inferred".into()),
        Op::Constant(lit) => Shape::new(lit.dtype, lit.dims.clone()),
        Op::Unary(_) => {
            float_only(op, operands[0])?;
            plain(operands[0])
        }
        Op::Binary(b) => {
            same_type(op, operands[0], operands[1])?;
            // i32 adds, subtracts, multiplies (wrapping) and takes maxima and minima: TFLite's
            // integer kernels (`front/tflite/`); division and powers are f32 only.
            if !(b.takes_i32() && operands[0].dtype == DType::I32) {
                float_only(op, operands[0])?;
            }
            plain(operands[0])
        }
        Op::Convert { to } => {
            let from = operands[0].dtype;
            for d in [from, *to] {
                if !matches!(d, DType::Pred | DType::I32 | DType::F32) {
                    return Err(format!("convert supports pred, i32 and f32, not {d}"));
                }
            }
            Shape::new(*to, operands[0].dims.clone())
        }
        Op::Compare(_) => {
            same_type(op, operands[0], operands[1])?;
            Shape::new(DType::Pred, operands[0].dims.clone())
        }
        Op::Select => {
            let (p, t, f) = (operands[0], operands[1], operands[2]);
            if p.dtype != DType::Pred || p.dims != t.dims {
                return Err(format!(
                    "select needs a pred operand of the value shape, got {} and {}",
                    p, t
                ));
            }
            same_type(op, t, f)?;
            plain(t)
        }
        Op::Clamp => {
            let (lo, x, hi) = (operands[0], operands[1], operands[2]);
            for bound in [lo, hi] {
                if bound.dtype != x.dtype || (bound.rank() != 0 && bound.dims != x.dims) {
                    return Err(format!(
                        "clamp bounds must be scalars or of the operand's shape {}, got {}",
                        x, bound
                    ));
                }
            }
            plain(x)
        }
        Op::Fma => {
            let (a, b, c) = (operands[0], operands[1], operands[2]);
            let same = |s: &Shape| s.dtype == DType::F32 && s.dims == a.dims;
            if !(same(a) && same(b) && same(c)) {
                return Err(format!(
                    "fma needs three f32 operands of one shape, got {a}, {b} and {c}"
                ));
            }
            plain(a)
        }
        Op::MulQ31 => {
            // x is i32, or f32 holding integers (converted to s32 first, as `convert` does).
            let (x, m, s) = (operands[0], operands[1], operands[2]);
            let same = |t: &Shape| t.dtype == DType::I32 && t.dims == x.dims;
            let x_ok = matches!(x.dtype, DType::I32 | DType::F32);
            if !(x_ok && same(m) && same(s)) {
                return Err(format!(
                    "multiply-q31 needs an i32 or f32 value and two i32 operands of its shape, got {x}, {m} and {s}"
                ));
            }
            plain(x)
        }
        Op::Broadcast { dimensions } => return Err(broadcast_needs_dims(dimensions)),
        Op::Reshape => return Err("reshape result dims are declared, not inferred".into()),
        Op::Transpose { permutation } => {
            let x = operands[0];
            if !is_permutation(permutation, x.rank()) {
                return Err(format!(
                    "dimensions {} is not a permutation of the {} dims of {}",
                    dims_str(permutation),
                    x.rank(),
                    x
                ));
            }
            Shape::new(x.dtype, permutation.iter().map(|&p| x.dims[p]).collect())
        }
        Op::Slice {
            starts,
            limits,
            strides,
        } => {
            let x = operands[0];
            if starts.len() != x.rank() || limits.len() != x.rank() || strides.len() != x.rank() {
                return Err(format!(
                    "slice needs one [start:limit:stride] per dim of {}",
                    x
                ));
            }
            let mut dims = Vec::with_capacity(x.rank());
            for i in 0..x.rank() {
                if strides[i] == 0 || starts[i] > limits[i] || limits[i] > x.dims[i] {
                    return Err(format!(
                        "slice [{}:{}:{}] does not fit dim {} of extent {}",
                        starts[i], limits[i], strides[i], i, x.dims[i]
                    ));
                }
                dims.push((limits[i] - starts[i]).div_ceil(strides[i]));
            }
            Shape::new(x.dtype, dims)
        }
        Op::Pad { low, high } => {
            let (x, v) = (operands[0], operands[1]);
            if v.rank() != 0 || v.dtype != x.dtype {
                return Err(format!("pad value must be a {} scalar, got {}", x.dtype, v));
            }
            if low.len() != x.rank() || high.len() != x.rank() {
                return Err(format!("padding needs one low_high pair per dim of {}", x));
            }
            let mut dims = Vec::with_capacity(x.rank());
            for i in 0..x.rank() {
                let d = x.dims[i]
                    .checked_add(low[i])
                    .and_then(|d| d.checked_add(high[i]))
                    .ok_or("padded dimension overflows")?;
                dims.push(d);
            }
            Shape::new(x.dtype, dims)
        }
        Op::Concatenate { dimension } => {
            let first = operands
                .first()
                .ok_or("concatenate needs at least one operand")?;
            if *dimension >= first.rank() {
                return Err(format!(
                    "dimension {} is out of range for {}",
                    dimension, first
                ));
            }
            let mut dims = first.dims.clone();
            dims[*dimension] = 0;
            for s in operands {
                let matches = s.dtype == first.dtype
                    && s.rank() == first.rank()
                    && (0..s.rank()).all(|i| i == *dimension || s.dims[i] == first.dims[i]);
                if !matches {
                    return Err(format!(
                        "operands {} and {} differ outside dimension {}",
                        first, s, dimension
                    ));
                }
                dims[*dimension] = dims[*dimension]
                    .checked_add(s.dims[*dimension])
                    .ok_or("concatenated dimension overflows")?;
            }
            Shape::new(first.dtype, dims)
        }
        Op::Reduce { dimensions, .. } => {
            let x = operands[0];
            float_only(op, x)?;
            if !is_sorted_unique(dimensions) || dimensions.iter().any(|&d| d >= x.rank()) {
                return Err(format!(
                    "reduce dimensions {} must be sorted, unique dims of {}",
                    dims_str(dimensions),
                    x
                ));
            }
            let dims = (0..x.rank())
                .filter(|d| !dimensions.contains(d))
                .map(|d| x.dims[d])
                .collect();
            Shape::new(x.dtype, dims)
        }
        Op::ReduceWindow { window, .. } => {
            let x = operands[0];
            float_only(op, x)?;
            let dims = window_dims(window, &x.dims, x)?;
            Shape::new(x.dtype, dims)
        }
        Op::Dot(d) => dot_shape(d, operands[0], operands[1])?,
        Op::Convolution {
            window,
            feature_group_count,
        } => conv_shape(window, *feature_group_count, operands[0], operands[1])?,
        Op::Argmax { dimension } => {
            let x = operands[0];
            float_only(op, x)?;
            if *dimension >= x.rank() {
                return Err(format!("dimension {} is out of range for {}", dimension, x));
            }
            if x.dims[*dimension] == 0 {
                return Err(format!(
                    "argmax over the empty dimension {dimension} of {x}"
                ));
            }
            let mut dims = x.dims.clone();
            dims.remove(*dimension);
            Shape::new(DType::I32, dims)
        }
        Op::TopK { k, indices } => {
            let x = operands[0];
            float_only(op, x)?;
            let Some(&last) = x.dims.last() else {
                return Err(format!("top-k needs an operand of rank >= 1, got {x}"));
            };
            if *k == 0 || *k > last {
                return Err(format!(
                    "top-k needs 1 <= k <= {last} (the last dimension of {x}), got k={k}"
                ));
            }
            let mut dims = x.dims.clone();
            *dims.last_mut().expect("rank >= 1") = *k;
            Shape::new(if *indices { DType::I32 } else { DType::F32 }, dims)
        }
        Op::Sample => {
            let x = operands[0];
            float_only(op, x)?;
            if x.rank() == 0 || x.dims.last() == Some(&0) {
                return Err(format!(
                    "sample needs logits of rank >= 1 with a non-empty last dimension, got {x}"
                ));
            }
            let want = [DType::I32, DType::I32, DType::F32, DType::I32, DType::F32];
            let names = ["seed", "step", "temperature", "top_k", "top_p"];
            for ((s, d), n) in operands[1..].iter().zip(want).zip(names) {
                if s.rank() != 0 || s.dtype != d {
                    return Err(format!("sample's {n} must be a {d} scalar, got {s}"));
                }
            }
            let mut dims = x.dims.clone();
            dims.pop();
            Shape::new(DType::I32, dims)
        }
        Op::Fusion { computation, .. } => {
            let params = computation.parameters();
            if params.len() != operands.len() {
                return Err(format!(
                    "fusion has {} operand(s) but its computation %{} has {} parameter(s)",
                    operands.len(),
                    computation.name,
                    params.len()
                ));
            }
            for (k, (&p, s)) in params.iter().zip(operands).enumerate() {
                if !computation.inst(p).shape.same_type(s) {
                    return Err(format!(
                        "fusion operand {k} is {} but parameter {k} of %{} is {}",
                        s,
                        computation.name,
                        computation.inst(p).shape
                    ));
                }
            }
            match computation.outputs.as_slice() {
                [o] => plain(&computation.inst(o.value).shape),
                _ => {
                    return Err(format!(
                        "fused computation %{} must have exactly one output",
                        computation.name
                    ));
                }
            }
        }
        Op::Gather => {
            let (table, idx) = (operands[0], operands[1]);
            if table.rank() < 1 || idx.dtype != DType::I32 {
                return Err(format!(
                    "gather needs a table of rank >= 1 and i32 indices, got {} and {}",
                    table, idx
                ));
            }
            let mut dims = idx.dims.clone();
            dims.extend_from_slice(&table.dims[1..]);
            Shape::new(table.dtype, dims)
        }
    };
    if checked_element_count(&shape.dims).is_none() {
        return Err(format!(
            "result {} has more than {} elements",
            dims_str(&shape.dims),
            super::shape::MAX_ELEMENTS
        ));
    }
    Ok(shape)
}

/// Checks a broadcast from `operand` to `result` dims (result dims are declared, like XLA).
pub fn check_broadcast(
    dimensions: &[usize],
    operand: &Shape,
    result: &[usize],
) -> Result<(), String> {
    if dimensions.len() != operand.rank() {
        return Err(format!(
            "broadcast maps {} operand dims but {} has {}",
            dimensions.len(),
            operand,
            operand.rank()
        ));
    }
    for (i, &d) in dimensions.iter().enumerate() {
        if d >= result.len() || (i > 0 && d <= dimensions[i - 1]) {
            return Err(format!(
                "broadcast dimensions {} must be increasing dims of the result {}",
                dims_str(dimensions),
                dims_str(result)
            ));
        }
    }
    for (i, &d) in dimensions.iter().enumerate() {
        if operand.dims[i] != result[d] && operand.dims[i] != 1 {
            return Err(format!(
                "operand dim {} (extent {}) cannot broadcast to result dim {} (extent {})",
                i, operand.dims[i], d, result[d]
            ));
        }
    }
    Ok(())
}

/// Checks a reshape keeps the element count.
pub fn check_reshape(operand: &Shape, result: &[usize]) -> Result<(), String> {
    match checked_element_count(result) {
        Some(n) if n == operand.element_count() => Ok(()),
        _ => Err(format!(
            "reshape from {} to {} changes the element count",
            dims_str(&operand.dims),
            dims_str(result)
        )),
    }
}

fn broadcast_needs_dims(_: &[usize]) -> String {
    "broadcast result dims are declared, not inferred".into()
}

fn plain(s: &Shape) -> Shape {
    Shape::new(s.dtype, s.dims.clone())
}

fn float_only(op: &Op, s: &Shape) -> Result<(), String> {
    if s.dtype.is_float() {
        Ok(())
    } else {
        Err(format!("{} needs a float operand, got {}", op.opcode(), s))
    }
}

fn same_type(op: &Op, a: &Shape, b: &Shape) -> Result<(), String> {
    if a.same_type(b) {
        Ok(())
    } else {
        Err(format!(
            "{} needs operands of one shape, got {} and {}",
            op.opcode(),
            a,
            b
        ))
    }
}

fn is_permutation(p: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    p.len() == rank
        && p.iter().all(|&d| {
            if d >= rank || seen[d] {
                false
            } else {
                seen[d] = true;
                true
            }
        })
}

fn is_sorted_unique(v: &[usize]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

fn window_dims(window: &Window, input: &[usize], x: &Shape) -> Result<Vec<usize>, String> {
    if !window.is_consistent() || window.rank() != input.len() {
        return Err(format!(
            "window has {} dims but is applied to {} dims of {}",
            window.rank(),
            input.len(),
            x
        ));
    }
    (0..window.rank())
        .map(|i| {
            window.output_extent(i, input[i]).ok_or_else(|| {
                format!(
                    "window dim {} (size {}, stride {}, dilation {}, padding {}_{}) does not fit extent {}",
                    i,
                    window.size[i],
                    window.stride[i],
                    window.dilation[i],
                    window.pad_low[i],
                    window.pad_high[i],
                    input[i]
                )
            })
        })
        .collect()
}

fn dot_shape(d: &DotDims, lhs: &Shape, rhs: &Shape) -> Result<Shape, String> {
    if lhs.dtype != rhs.dtype || !lhs.dtype.is_float() {
        return Err(format!(
            "dot needs float operands of one dtype, got {} and {}",
            lhs, rhs
        ));
    }
    let valid = |dims: &[usize], rank: usize| dims.iter().all(|&x| x < rank);
    let mut all_l: Vec<usize> = d
        .lhs_batch
        .iter()
        .chain(&d.lhs_contracting)
        .copied()
        .collect();
    let mut all_r: Vec<usize> = d
        .rhs_batch
        .iter()
        .chain(&d.rhs_contracting)
        .copied()
        .collect();
    all_l.sort();
    all_r.sort();
    if !valid(&all_l, lhs.rank())
        || !valid(&all_r, rhs.rank())
        || !is_sorted_unique(&all_l)
        || !is_sorted_unique(&all_r)
        || d.lhs_batch.len() != d.rhs_batch.len()
        || d.lhs_contracting.len() != d.rhs_contracting.len()
    {
        return Err(format!(
            "dot dimension numbers lhs_batch={} lhs_contracting={} rhs_batch={} rhs_contracting={} do not fit {} and {}",
            dims_str(&d.lhs_batch),
            dims_str(&d.lhs_contracting),
            dims_str(&d.rhs_batch),
            dims_str(&d.rhs_contracting),
            lhs,
            rhs
        ));
    }
    for (a, b) in d
        .lhs_batch
        .iter()
        .zip(&d.rhs_batch)
        .chain(d.lhs_contracting.iter().zip(&d.rhs_contracting))
    {
        if lhs.dims[*a] != rhs.dims[*b] {
            return Err(format!(
                "dot pairs lhs dim {} (extent {}) with rhs dim {} (extent {}) in {} and {}",
                a, lhs.dims[*a], b, rhs.dims[*b], lhs, rhs
            ));
        }
    }
    let mut dims: Vec<usize> = d.lhs_batch.iter().map(|&i| lhs.dims[i]).collect();
    dims.extend(
        (0..lhs.rank())
            .filter(|i| !all_l.contains(i))
            .map(|i| lhs.dims[i]),
    );
    dims.extend(
        (0..rhs.rank())
            .filter(|i| !all_r.contains(i))
            .map(|i| rhs.dims[i]),
    );
    Ok(Shape::new(lhs.dtype, dims))
}

fn conv_shape(window: &Window, groups: usize, x: &Shape, k: &Shape) -> Result<Shape, String> {
    if x.dtype != k.dtype || !x.dtype.is_float() {
        return Err(format!(
            "convolution needs float operands of one dtype, got {} and {}",
            x, k
        ));
    }
    if x.rank() < 3 || k.rank() != x.rank() || window.rank() != x.rank() - 2 {
        return Err(format!(
            "convolution needs input [N,C,spatial...] and kernel [O,C/groups,window...] of equal rank with a window per spatial dim, got {} and {}",
            x, k
        ));
    }
    if groups == 0
        || x.dims[1] % groups != 0
        || k.dims[0] % groups != 0
        || k.dims[1] * groups != x.dims[1]
    {
        return Err(format!(
            "feature_group_count={} does not fit input channels {} and kernel {}",
            groups, x.dims[1], k
        ));
    }
    if window.size[..] != k.dims[2..] {
        return Err(format!(
            "window size {} differs from the kernel's spatial dims {}",
            dims_str(&window.size),
            dims_str(&k.dims[2..])
        ));
    }
    let spatial = window_dims(window, &x.dims[2..], x)?;
    let mut dims = vec![x.dims[0], k.dims[0]];
    dims.extend(spatial);
    Ok(Shape::new(x.dtype, dims))
}
