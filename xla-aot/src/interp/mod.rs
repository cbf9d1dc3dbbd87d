//! The reference interpreter: the oracle every compiled artefact is tested against.
//!
//! Contract: [`evaluate`] runs the entry computation of a verified module on host literals and
//! returns one literal per output, in order. It is plain, obviously correct Rust that shares no
//! code with any backend: loops over logical row-major indices, elementwise math in f64 rounded
//! once to f32, and f64 accumulation for every sum (dot, convolution, reductions, pooling).
//! Layouts are ignored (literals are logical). Errors are typed; it never panics on a verified
//! module.

mod sample;
mod tensor;

pub use sample::{philox4x32_10, sample_row, top_k_row, uniform};

use crate::ir::shape::dims_str;
use crate::ir::{
    BinaryOp, CompareDir, Computation, DType, InstId, Literal, Module, Op, ReduceKind, UnaryOp,
    Window,
};
use tensor::{Data, Tensor, strides, unravel};
use thiserror::Error;

/// Why evaluation could not run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InterpError {
    /// Wrong number of inputs.
    #[error("the model takes {expected} input(s), {found} given")]
    InputCount { expected: usize, found: usize },
    /// An input of the wrong dtype or shape.
    #[error("input `{name}` must be {expected}, got {found}")]
    InputShape {
        name: String,
        expected: String,
        found: String,
    },
    /// An input value the C API rejects (an int64 outside the i32 range the model computes in).
    #[error("input `{name}`: {reason}")]
    BadArgument { name: String, reason: String },
    /// A constant whose data was elided in HLO text.
    #[error(
        "constant %{0} was elided (`{{...}}`) in the HLO text; print it with --print-large-constants to evaluate it"
    )]
    Elided(String),
    /// A dtype the interpreter does not evaluate.
    #[error("instruction %{name}: dtype {dtype} is not supported by the interpreter")]
    Unsupported { name: String, dtype: DType },
}

/// Evaluates `m` on `inputs` (one per parameter, in parameter order).
/// Inputs and outputs with a C API dtype (`ir/api.rs`) are taken and returned in it, converted
/// as the compiled entry points convert them (an input given in the IR dtype is used as is).
pub fn evaluate(m: &Module, inputs: &[Literal]) -> Result<Vec<Literal>, InterpError> {
    if m.api.is_empty() {
        return eval_computation(&m.entry, inputs);
    }
    let params = m.entry.parameters();
    let mut converted = Vec::with_capacity(inputs.len());
    for (k, lit) in inputs.iter().enumerate() {
        converted.push(match m.api.input(k) {
            Some(api) if lit.dtype == api => {
                crate::ir::api::to_ir(lit).map_err(|e| InterpError::BadArgument {
                    name: params
                        .get(k)
                        .map(|&p| m.entry.inst(p).name.clone())
                        .unwrap_or_default(),
                    reason: e,
                })?
            }
            _ => lit.clone(),
        });
    }
    let outs = eval_computation(&m.entry, &converted)?;
    Ok(outs
        .into_iter()
        .enumerate()
        .map(|(k, o)| match m.api.output(k) {
            Some(api) => crate::ir::api::to_api(&o, api),
            None => o,
        })
        .collect())
}

/// Evaluates one computation (the entry, or a fused computation on its operands).
fn eval_computation(c: &Computation, inputs: &[Literal]) -> Result<Vec<Literal>, InterpError> {
    let params = c.parameters();
    if params.len() != inputs.len() {
        return Err(InterpError::InputCount {
            expected: params.len(),
            found: inputs.len(),
        });
    }
    let mut values: Vec<Option<Tensor>> = vec![None; c.instructions.len()];
    // Free each value after its last use, so big models do not hold every intermediate.
    let mut last_use = vec![0usize; c.instructions.len()];
    for (i, inst) in c.instructions.iter().enumerate() {
        for o in &inst.operands {
            last_use[o.index()] = i;
        }
    }
    for o in &c.outputs {
        last_use[o.value.index()] = usize::MAX;
    }
    for (i, inst) in c.instructions.iter().enumerate() {
        let get = |id: &InstId| {
            values[id.index()]
                .as_ref()
                .expect("operands are evaluated first")
        };
        let ops: Vec<&Tensor> = inst.operands.iter().map(get).collect();
        let out_dims = inst.shape.dims.clone();
        let t = match &inst.op {
            Op::Parameter { index } => {
                let lit = &inputs[*index];
                if lit.dtype != inst.shape.dtype || lit.dims != inst.shape.dims {
                    return Err(InterpError::InputShape {
                        name: inst.name.clone(),
                        expected: format!("{}{}", inst.shape.dtype, dims_str(&inst.shape.dims)),
                        found: format!("{}{}", lit.dtype, dims_str(&lit.dims)),
                    });
                }
                Tensor::from_literal(lit).ok_or_else(|| InterpError::Unsupported {
                    name: inst.name.clone(),
                    dtype: lit.dtype,
                })?
            }
            Op::Constant(lit) => {
                if lit.is_elided() {
                    return Err(InterpError::Elided(inst.name.clone()));
                }
                Tensor::from_literal(lit).ok_or_else(|| InterpError::Unsupported {
                    name: inst.name.clone(),
                    dtype: lit.dtype,
                })?
            }
            Op::Unary(u) => map_f32(ops[0], |x| unary(*u, x)),
            Op::Binary(b) if inst.shape.dtype == DType::I32 => {
                let (x, y) = (ops[0].i32(), ops[1].i32());
                Tensor {
                    dims: out_dims,
                    data: Data::I32(x.iter().zip(y).map(|(&p, &q)| b.eval_i32(p, q)).collect()),
                }
            }
            Op::Binary(b) => zip_f32(ops[0], ops[1], |x, y| binary(*b, x, y)),
            Op::MulQ31 => {
                // An f32 value is converted to s32 first (`convert`'s rule) and the result back.
                let float = matches!(ops[0].data, Data::F32(_));
                let xi = convert(ops[0], DType::I32);
                let (m, s) = (ops[1].i32(), ops[2].i32());
                let data: Vec<i32> = xi
                    .i32()
                    .iter()
                    .zip(m)
                    .zip(s)
                    .map(|((&x, &m), &s)| {
                        crate::ir::fixed_point::multiply_by_quantized_multiplier(
                            x,
                            crate::ir::fixed_point::QuantizedMultiplier {
                                significand: m,
                                shift: s,
                            },
                        )
                    })
                    .collect();
                Tensor {
                    dims: out_dims,
                    data: if float {
                        Data::F32(data.into_iter().map(|v| v as f32).collect())
                    } else {
                        Data::I32(data)
                    },
                }
            }
            Op::Convert { to } => convert(ops[0], *to),
            Op::Compare(d) => compare(*d, ops[0], ops[1]),
            Op::Select => select(ops[0], ops[1], ops[2]),
            Op::Clamp => clamp(ops[0], ops[1], ops[2]),
            Op::Fma => fma(ops[0], ops[1], ops[2]),
            Op::Broadcast { dimensions } => broadcast(ops[0], dimensions, &out_dims),
            Op::Reshape => Tensor {
                dims: out_dims,
                data: ops[0].data.clone(),
            },
            Op::Transpose { permutation } => transpose(ops[0], permutation, &out_dims),
            Op::Slice {
                starts,
                strides: st,
                ..
            } => slice(ops[0], starts, st, &out_dims),
            Op::Pad { low, .. } => pad(ops[0], ops[1], low, &out_dims),
            Op::Concatenate { dimension } => concatenate(&ops, *dimension, &out_dims),
            Op::Reduce { kind, dimensions } => reduce(ops[0], *kind, dimensions, &out_dims),
            Op::ReduceWindow { kind, window } => reduce_window(ops[0], *kind, window, &out_dims),
            Op::Dot(d) => dot(ops[0], ops[1], d, &out_dims),
            Op::Convolution {
                window,
                feature_group_count,
            } => convolution(ops[0], ops[1], window, *feature_group_count, &out_dims),
            Op::Argmax { dimension } => argmax(ops[0], *dimension, &out_dims),
            Op::Gather => gather(ops[0], ops[1], &out_dims),
            Op::TopK { k, indices } => top_k(ops[0], *k, *indices, &out_dims),
            Op::Sample => sample(&ops, &out_dims),
            Op::Fusion { computation, .. } => {
                let args: Vec<Literal> = ops.iter().map(|t| t.to_literal()).collect();
                let out = eval_computation(computation, &args)?;
                Tensor::from_literal(&out[0]).expect("fusion results have supported dtypes")
            }
        };
        values[i] = Some(t);
        for o in &inst.operands {
            if last_use[o.index()] == i {
                values[o.index()] = None;
            }
        }
    }
    Ok(c.outputs
        .iter()
        .map(|o| {
            values[o.value.index()]
                .as_ref()
                .expect("outputs are kept")
                .to_literal()
        })
        .collect())
}

/// The op table's reference semantics (`ir/inst/table.rs`).
fn unary(u: UnaryOp, x: f64) -> f64 {
    (u.info().reference)(x)
}

/// The op table's reference semantics (`ir/inst/table.rs`).
fn binary(b: BinaryOp, x: f64, y: f64) -> f64 {
    (b.info().reference)(x, y)
}

fn map_f32(x: &Tensor, f: impl Fn(f64) -> f64) -> Tensor {
    let v = x.f32();
    Tensor {
        dims: x.dims.clone(),
        data: Data::F32(v.iter().map(|&a| f(a as f64) as f32).collect()),
    }
}

fn zip_f32(x: &Tensor, y: &Tensor, f: impl Fn(f64, f64) -> f64) -> Tensor {
    let (a, b) = (x.f32(), y.f32());
    Tensor {
        dims: x.dims.clone(),
        data: Data::F32(
            a.iter()
                .zip(b)
                .map(|(&p, &q)| f(p as f64, q as f64) as f32)
                .collect(),
        ),
    }
}

/// `top-k` along the last dimension, row by row.
fn top_k(x: &Tensor, k: usize, indices: bool, out_dims: &[usize]) -> Tensor {
    let v = *x.dims.last().expect("rank >= 1");
    let (mut vals, mut idx) = (Vec::new(), Vec::new());
    for row in x.f32().chunks(v.max(1)) {
        for (val, i) in top_k_row(row, k) {
            vals.push(val);
            idx.push(i as i32);
        }
    }
    Tensor {
        dims: out_dims.to_vec(),
        data: if indices {
            Data::I32(idx)
        } else {
            Data::F32(vals)
        },
    }
}

/// `sample`, row by row; the row number (the linear index of the result element) is the
/// generator's second counter word.
fn sample(ops: &[&Tensor], out_dims: &[usize]) -> Tensor {
    let x = ops[0];
    let v = *x.dims.last().expect("rank >= 1");
    let scalar = |t: &Tensor| t.get_f64(0);
    let (seed, step) = (scalar(ops[1]) as i32, scalar(ops[2]) as i32);
    let temperature = scalar(ops[3]) as f32;
    let top_k = scalar(ops[4]) as i32;
    let top_p = scalar(ops[5]) as f32;
    let tokens = x
        .f32()
        .chunks(v)
        .enumerate()
        .map(|(r, row)| sample_row(row, seed, step, r as u32, temperature, top_k, top_p))
        .collect();
    Tensor {
        dims: out_dims.to_vec(),
        data: Data::I32(tokens),
    }
}

/// `convert`: f32 → i32 rounds toward zero and saturates (Rust's `as`, NaN → 0); → pred is `!= 0`.
fn convert(x: &Tensor, to: DType) -> Tensor {
    let n = x.len();
    let f = |i: usize| -> f64 {
        match &x.data {
            Data::F32(v) => v[i] as f64,
            Data::I32(v) => v[i] as f64,
            Data::Pred(v) => v[i] as u8 as f64,
        }
    };
    let data = match to {
        DType::F32 => Data::F32((0..n).map(|i| f(i) as f32).collect()),
        DType::I32 => Data::I32(match &x.data {
            Data::I32(v) => v.clone(),
            _ => (0..n).map(|i| f(i) as i32).collect(),
        }),
        _ => Data::Pred((0..n).map(|i| f(i) != 0.0).collect()),
    };
    Tensor {
        dims: x.dims.clone(),
        data,
    }
}

fn compare(d: CompareDir, x: &Tensor, y: &Tensor) -> Tensor {
    let pairs: Vec<(f64, f64)> = (0..x.len()).map(|i| (x.get_f64(i), y.get_f64(i))).collect();
    let out = pairs
        .into_iter()
        .map(|(a, b)| match d {
            CompareDir::Eq => a == b,
            CompareDir::Ne => a != b,
            CompareDir::Lt => a < b,
            CompareDir::Le => a <= b,
            CompareDir::Gt => a > b,
            CompareDir::Ge => a >= b,
        })
        .collect();
    Tensor {
        dims: x.dims.clone(),
        data: Data::Pred(out),
    }
}

fn select(p: &Tensor, t: &Tensor, f: &Tensor) -> Tensor {
    let Data::Pred(pv) = &p.data else {
        unreachable!("verified: select predicate is pred")
    };
    let idx: Vec<usize> = (0..t.len()).collect();
    Tensor {
        dims: t.dims.clone(),
        data: t
            .data
            .gather_from(&idx, |i| if pv[i] { (t, i) } else { (f, i) }),
    }
}

fn clamp(lo: &Tensor, x: &Tensor, hi: &Tensor) -> Tensor {
    let bound = |b: &Tensor, i: usize| {
        if b.dims.is_empty() {
            b.get_f64(0)
        } else {
            b.get_f64(i)
        }
    };
    let vals: Vec<f64> = (0..x.len())
        .map(|i| {
            let v = x.get_f64(i);
            if v.is_nan() {
                v
            } else {
                v.max(bound(lo, i)).min(bound(hi, i))
            }
        })
        .collect();
    Tensor::from_f64(x.dtype(), x.dims.clone(), &vals)
}

/// `a · b + c` in f32 with one rounding (`f32::mul_add`: the host's fused multiply-add).
fn fma(a: &Tensor, b: &Tensor, c: &Tensor) -> Tensor {
    let data = a
        .f32()
        .iter()
        .zip(b.f32())
        .zip(c.f32())
        .map(|((&x, &y), &z)| x.mul_add(y, z))
        .collect();
    Tensor {
        dims: a.dims.clone(),
        data: Data::F32(data),
    }
}

fn broadcast(x: &Tensor, dimensions: &[usize], out: &[usize]) -> Tensor {
    let xs = strides(&x.dims);
    let n: usize = out.iter().product();
    let src: Vec<usize> = (0..n)
        .map(|i| {
            let coord = unravel(i, out);
            dimensions
                .iter()
                .enumerate()
                .map(|(k, &d)| if x.dims[k] == 1 { 0 } else { coord[d] * xs[k] })
                .sum()
        })
        .collect();
    Tensor {
        dims: out.to_vec(),
        data: x.data.gather_from(&src, |i| (x, i)),
    }
}

fn transpose(x: &Tensor, perm: &[usize], out: &[usize]) -> Tensor {
    let xs = strides(&x.dims);
    let n: usize = out.iter().product();
    let src: Vec<usize> = (0..n)
        .map(|i| {
            let coord = unravel(i, out);
            perm.iter()
                .enumerate()
                .map(|(k, &p)| coord[k] * xs[p])
                .sum()
        })
        .collect();
    Tensor {
        dims: out.to_vec(),
        data: x.data.gather_from(&src, |i| (x, i)),
    }
}

fn slice(x: &Tensor, starts: &[usize], st: &[usize], out: &[usize]) -> Tensor {
    let xs = strides(&x.dims);
    let n: usize = out.iter().product();
    let src: Vec<usize> = (0..n)
        .map(|i| {
            let coord = unravel(i, out);
            (0..out.len())
                .map(|k| (starts[k] + coord[k] * st[k]) * xs[k])
                .sum()
        })
        .collect();
    Tensor {
        dims: out.to_vec(),
        data: x.data.gather_from(&src, |i| (x, i)),
    }
}

fn pad(x: &Tensor, value: &Tensor, low: &[usize], out: &[usize]) -> Tensor {
    let xs = strides(&x.dims);
    let n: usize = out.iter().product();
    let src: Vec<Option<usize>> = (0..n)
        .map(|i| {
            let coord = unravel(i, out);
            let mut off = 0;
            for k in 0..out.len() {
                if coord[k] < low[k] || coord[k] - low[k] >= x.dims[k] {
                    return None;
                }
                off += (coord[k] - low[k]) * xs[k];
            }
            Some(off)
        })
        .collect();
    let idx: Vec<usize> = (0..n).collect();
    Tensor {
        dims: out.to_vec(),
        data: x.data.gather_from(&idx, |i| match src[i] {
            Some(o) => (x, o),
            None => (value, 0),
        }),
    }
}

fn concatenate(ops: &[&Tensor], dim: usize, out: &[usize]) -> Tensor {
    let n: usize = out.iter().product();
    // For each output element: which operand and which offset.
    let mut starts = Vec::with_capacity(ops.len());
    let mut acc = 0;
    for t in ops {
        starts.push(acc);
        acc += t.dims[dim];
    }
    let idx: Vec<usize> = (0..n).collect();
    let data = ops[0].data.gather_from(&idx, |i| {
        let mut coord = unravel(i, out);
        let k = starts.iter().rposition(|&s| s <= coord[dim]).unwrap_or(0);
        coord[dim] -= starts[k];
        let t = ops[k];
        let off: usize = coord.iter().zip(strides(&t.dims)).map(|(c, s)| c * s).sum();
        (t, off)
    });
    Tensor {
        dims: out.to_vec(),
        data,
    }
}

fn init(kind: ReduceKind) -> f64 {
    match kind {
        ReduceKind::Add => 0.0,
        ReduceKind::Max => f64::NEG_INFINITY,
        ReduceKind::Min => f64::INFINITY,
    }
}

fn combine(kind: ReduceKind, acc: f64, v: f64) -> f64 {
    match kind {
        ReduceKind::Add => acc + v,
        ReduceKind::Max => {
            if acc.is_nan() || v.is_nan() {
                f64::NAN
            } else {
                acc.max(v)
            }
        }
        ReduceKind::Min => {
            if acc.is_nan() || v.is_nan() {
                f64::NAN
            } else {
                acc.min(v)
            }
        }
    }
}

fn reduce(x: &Tensor, kind: ReduceKind, dims: &[usize], out: &[usize]) -> Tensor {
    let v = x.f32();
    let n: usize = out.iter().product();
    let mut acc = vec![init(kind); n];
    let kept: Vec<usize> = (0..x.dims.len()).filter(|d| !dims.contains(d)).collect();
    let os = strides(out);
    for (i, &val) in v.iter().enumerate() {
        let coord = unravel(i, &x.dims);
        let o: usize = kept
            .iter()
            .enumerate()
            .map(|(k, &d)| coord[d] * os[k])
            .sum();
        acc[o] = combine(kind, acc[o], val as f64);
    }
    Tensor::from_f64(DType::F32, out.to_vec(), &acc)
}

fn reduce_window(x: &Tensor, kind: ReduceKind, w: &Window, out: &[usize]) -> Tensor {
    let v = x.f32();
    let xs = strides(&x.dims);
    let n: usize = out.iter().product();
    let taps: usize = w.size.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| {
            let oc = unravel(i, out);
            let mut acc = init(kind);
            'tap: for t in 0..taps {
                let tc = unravel(t, &w.size);
                let mut off = 0;
                for k in 0..out.len() {
                    let pos = (oc[k] * w.stride[k] + tc[k] * w.dilation[k]) as isize
                        - w.pad_low[k] as isize;
                    if pos < 0 || pos as usize >= x.dims[k] {
                        continue 'tap; // padding holds the identity
                    }
                    off += pos as usize * xs[k];
                }
                acc = combine(kind, acc, v[off] as f64);
            }
            acc
        })
        .collect();
    Tensor::from_f64(DType::F32, out.to_vec(), &vals)
}

fn dot(l: &Tensor, r: &Tensor, d: &crate::ir::DotDims, out: &[usize]) -> Tensor {
    let (lv, rv) = (l.f32(), r.f32());
    let (ls, rs) = (strides(&l.dims), strides(&r.dims));
    let lfree: Vec<usize> = (0..l.dims.len())
        .filter(|i| !d.lhs_batch.contains(i) && !d.lhs_contracting.contains(i))
        .collect();
    let rfree: Vec<usize> = (0..r.dims.len())
        .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
        .collect();
    let cdims: Vec<usize> = d.lhs_contracting.iter().map(|&i| l.dims[i]).collect();
    let ctaps: usize = cdims.iter().product();
    let nb = d.lhs_batch.len();
    let n: usize = out.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| {
            let oc = unravel(i, out);
            let mut lbase = 0;
            let mut rbase = 0;
            for k in 0..nb {
                lbase += oc[k] * ls[d.lhs_batch[k]];
                rbase += oc[k] * rs[d.rhs_batch[k]];
            }
            for (k, &a) in lfree.iter().enumerate() {
                lbase += oc[nb + k] * ls[a];
            }
            for (k, &a) in rfree.iter().enumerate() {
                rbase += oc[nb + lfree.len() + k] * rs[a];
            }
            let mut acc = 0.0f64;
            for t in 0..ctaps {
                let cc = unravel(t, &cdims);
                let mut lo = lbase;
                let mut ro = rbase;
                for k in 0..cc.len() {
                    lo += cc[k] * ls[d.lhs_contracting[k]];
                    ro += cc[k] * rs[d.rhs_contracting[k]];
                }
                acc += lv[lo] as f64 * rv[ro] as f64;
            }
            acc
        })
        .collect();
    Tensor::from_f64(DType::F32, out.to_vec(), &vals)
}

fn convolution(x: &Tensor, k: &Tensor, w: &Window, groups: usize, out: &[usize]) -> Tensor {
    let (xv, kv) = (x.f32(), k.f32());
    let (xs, ks) = (strides(&x.dims), strides(&k.dims));
    let cin_g = k.dims[1];
    let cout_g = k.dims[0] / groups;
    let taps: usize = w.size.iter().product();
    let sp = w.rank();
    let n: usize = out.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| {
            let oc = unravel(i, out);
            let (b, o) = (oc[0], oc[1]);
            let g = o / cout_g;
            let mut acc = 0.0f64;
            for ci in 0..cin_g {
                let c = g * cin_g + ci;
                'tap: for t in 0..taps {
                    let tc = unravel(t, &w.size);
                    let mut xo = b * xs[0] + c * xs[1];
                    let mut ko = o * ks[0] + ci * ks[1];
                    for s in 0..sp {
                        let pos = (oc[2 + s] * w.stride[s] + tc[s] * w.dilation[s]) as isize
                            - w.pad_low[s] as isize;
                        if pos < 0 || pos as usize >= x.dims[2 + s] {
                            continue 'tap;
                        }
                        xo += pos as usize * xs[2 + s];
                        ko += tc[s] * ks[2 + s];
                    }
                    acc += xv[xo] as f64 * kv[ko] as f64;
                }
            }
            acc
        })
        .collect();
    Tensor::from_f64(DType::F32, out.to_vec(), &vals)
}

fn argmax(x: &Tensor, dim: usize, out: &[usize]) -> Tensor {
    let v = x.f32();
    let xs = strides(&x.dims);
    let n: usize = out.iter().product();
    let idx: Vec<i32> = (0..n)
        .map(|i| {
            let oc = unravel(i, out);
            // Output coordinates are the input's with `dim` removed.
            let base: usize = (0..x.dims.len())
                .filter(|&d| d != dim)
                .zip(&oc)
                .map(|(d, &c)| c * xs[d])
                .sum();
            // numpy semantics: the first maximum; a NaN counts as the maximum.
            let mut best = 0usize;
            let mut best_v = v[base];
            for j in 1..x.dims[dim] {
                let c = v[base + j * xs[dim]];
                if !best_v.is_nan() && (c > best_v || c.is_nan()) {
                    best = j;
                    best_v = c;
                }
            }
            best as i32
        })
        .collect();
    Tensor {
        dims: out.to_vec(),
        data: Data::I32(idx),
    }
}

fn gather(table: &Tensor, ids: &Tensor, out: &[usize]) -> Tensor {
    let Data::I32(iv) = &ids.data else {
        unreachable!("verified: gather indices are i32")
    };
    let rows = table.dims[0];
    let row: usize = table.dims[1..].iter().product();
    let n: usize = out.iter().product();
    let src: Vec<usize> = (0..n)
        .map(|i| {
            let (which, within) = (i / row, i % row);
            let r = (iv[which].max(0) as usize).min(rows - 1);
            r * row + within
        })
        .collect();
    Tensor {
        dims: out.to_vec(),
        data: table.data.gather_from(&src, |i| (table, i)),
    }
}
