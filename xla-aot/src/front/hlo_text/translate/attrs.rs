//! The text of HLO instructions' shapes, attributes and literals, parsed into IR values.
//!
//! Contract: element types, array shapes (bounded by the IR's element limit), integer lists,
//! literals (`constant({...})`), windows (`window={size=... stride=... pad=...}`), slices and
//! padding configs; each failure is an error at the instruction's line and column. Parameter
//! names lose XLA's `.N` suffix and become C identifiers here.

use super::super::syntax::{RawAttr, RawInst, RawShape, split_top};
use super::{TResult, err, err_at, with_hint};
use crate::ir::shape::dims_str;
use crate::ir::{DType, Literal, Shape, Window};

/// XLA's element type names.
pub(super) fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "f32" => DType::F32,
        "s32" => DType::I32,
        "pred" => DType::Pred,
        _ => return None,
    })
}

pub(super) fn array_shape(inst: &RawInst, s: &RawShape) -> TResult<Shape> {
    match s {
        RawShape::Array { dims, .. } if crate::ir::shape::check_rank(dims).is_err() => err_at(
            inst.line,
            inst.column,
            format!(
                "`{}`: {}",
                inst.name,
                crate::ir::shape::check_rank(dims).unwrap_err()
            ),
        ),
        RawShape::Array { dims, .. } if crate::ir::shape::checked_element_count(dims).is_none() => {
            err_at(
                inst.line,
                inst.column,
                format!(
                    "`{}` has more elements than xla-aot supports ({})",
                    inst.name,
                    dims_str(dims)
                ),
            )
        }
        RawShape::Array { dtype, dims } => match dtype_of(dtype) {
            Some(d) => Ok(Shape::new(d, dims.clone())),
            None => with_hint(
                err_at(
                    inst.line,
                    inst.column,
                    format!(
                        "element type `{dtype}` of `{}` is not supported: xla-aot computes in f32, with s32 indices and pred masks",
                        inst.name
                    ),
                ),
                "export in float32 (in JAX, keep jax_enable_x64 off and cast half/bfloat16 models to float32)",
            ),
        },
        RawShape::Tuple(_) => err_at(
            inst.line,
            inst.column,
            format!(
                "`{}` has a tuple type where an array was expected",
                inst.name
            ),
        ),
    }
}

/// `{1,2}` or `{}` → numbers.
pub(super) fn int_list(inst: &RawInst, a: &RawAttr) -> TResult<Vec<i64>> {
    let t = a.value.trim();
    let inner = t
        .strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .unwrap_or(t);
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>().or_else(|_| {
                err_at(
                    inst.line,
                    a.column,
                    format!(
                        "`{}` of `{}` must be a list of integers, found `{}`",
                        a.key, inst.opcode, a.value
                    ),
                )
            })
        })
        .collect()
}

pub(super) fn usize_list(inst: &RawInst, a: &RawAttr) -> TResult<Vec<usize>> {
    int_list(inst, a)?
        .into_iter()
        .map(|v| {
            usize::try_from(v).or_else(|_| {
                err_at(
                    inst.line,
                    a.column,
                    format!("`{}` must not be negative, found {v}", a.key),
                )
            })
        })
        .collect()
}

pub(super) fn stripped_param_name(name: &str) -> &str {
    // XLA's uniquifier appends `.N`.
    match name.rfind('.') {
        Some(i)
            if i > 0 && name[i + 1..].chars().all(|c| c.is_ascii_digit()) && i + 1 < name.len() =>
        {
            &name[..i]
        }
        _ => name,
    }
}

/// `x.1` → `x`; JAX's pytree paths (`params['w']` printed as `params__w__`) are sanitised.
pub(super) fn input_name(name: &str) -> String {
    let s = crate::util::c_name::identifier(stripped_param_name(name));
    let t = s.trim_end_matches('_');
    if t.is_empty() { s } else { t.to_string() }
}

/// Parses the literal text of `constant(...)` for `shape`.
pub(super) fn parse_literal(inst: &RawInst, shape: &Shape) -> TResult<Literal> {
    let text = inst.args_text.trim();
    if text.contains("...") {
        return with_hint(
            err(
                inst,
                format!(
                    "constant `{}` was printed elided (`{{...}}`): its values are not in the file",
                    inst.name
                ),
            ),
            "print the module with large constants (JAX: `jax.jit(f).lower(*args).compiler_ir('hlo').as_hlo_text(print_large_constants=True)`; XLA dumps: --xla_dump_large_constants), or pass the array as an argument and bind it to a weight in a YAML spec (`graph: {hlo: FILE}` with `params:`)",
        );
    }
    let tokens: Vec<&str> = text
        .split(|c: char| c == '{' || c == '}' || c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .collect();
    let n = shape.element_count();
    if tokens.len() != n {
        return err(
            inst,
            format!(
                "constant `{}` has {} value(s) for {} ({} elements)",
                inst.name,
                tokens.len(),
                shape,
                n
            ),
        );
    }
    let bad = |t: &str| err(inst, format!("`{t}` is not a valid {} value", shape.dtype));
    match shape.dtype {
        DType::F32 => {
            let mut v = Vec::with_capacity(n);
            for t in tokens {
                let x = match t {
                    "inf" => f32::INFINITY,
                    "-inf" => f32::NEG_INFINITY,
                    _ if t.trim_start_matches('-').starts_with("nan") => f32::NAN,
                    _ => match t.parse::<f32>() {
                        Ok(x) => x,
                        Err(_) => return bad(t),
                    },
                };
                v.push(x);
            }
            Ok(Literal::from_f32(shape.dims.clone(), &v))
        }
        DType::I32 => {
            let mut v = Vec::with_capacity(n);
            for t in tokens {
                match t.parse::<i32>() {
                    Ok(x) => v.push(x),
                    Err(_) => return bad(t),
                }
            }
            Ok(Literal::from_i32(shape.dims.clone(), &v))
        }
        _ => {
            let mut v = Vec::with_capacity(n);
            for t in tokens {
                v.push(match t {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return bad(t),
                });
            }
            Ok(Literal::from_pred(shape.dims.clone(), &v))
        }
    }
}

/// A literal of `dtype` from f64 values (integers are exact in f64 for every i32).
pub(super) fn literal_from_f64(dtype: DType, dims: Vec<usize>, v: &[f64]) -> Literal {
    match dtype {
        DType::F32 => Literal::from_f32(dims, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        DType::I32 => Literal::from_i32(dims, &v.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        _ => Literal::from_pred(dims, &v.iter().map(|&x| x != 0.0).collect::<Vec<_>>()),
    }
}

pub(super) fn literal_values(l: &Literal) -> Vec<f64> {
    match l.dtype {
        DType::Pred => l
            .to_pred_vec()
            .unwrap_or_default()
            .into_iter()
            .map(|b| b as u8 as f64)
            .collect(),
        _ => l.to_f64_vec(),
    }
}

/// `size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=2x2`; `lhs_dilate` and `rhs_reversal` refused.
pub(super) fn parse_window(inst: &RawInst, a: &RawAttr, rank: usize) -> TResult<Window> {
    let inner = a.value.trim().trim_start_matches('{').trim_end_matches('}');
    let mut w = Window::new(vec![1; rank]);
    let mut seen_size = false;
    for part in inner.split_whitespace() {
        let Some((k, v)) = part.split_once('=') else {
            return err_at(
                inst.line,
                a.column,
                format!("malformed window field `{part}`"),
            );
        };
        let nums = |sep: char| -> TResult<Vec<i64>> {
            v.split(sep)
                .map(|x| {
                    x.parse::<i64>().or_else(|_| {
                        err_at(
                            inst.line,
                            a.column,
                            format!("malformed window field `{part}`"),
                        )
                    })
                })
                .collect()
        };
        let pos = |xs: Vec<i64>| -> TResult<Vec<usize>> {
            if xs.len() != rank {
                return err_at(
                    inst.line,
                    a.column,
                    format!(
                        "window field `{part}` has {} entries for {rank} dimension(s)",
                        xs.len()
                    ),
                );
            }
            xs.into_iter()
                .map(|x| {
                    usize::try_from(x).or_else(|_| {
                        with_hint(
                            err_at(
                                inst.line,
                                a.column,
                                format!("negative window field `{part}` is not supported"),
                            ),
                            "negative padding crops the input; slice it before the window instead",
                        )
                    })
                })
                .collect()
        };
        match k {
            "size" => {
                w.size = pos(nums('x')?)?;
                seen_size = true;
            }
            "stride" => w.stride = pos(nums('x')?)?,
            "rhs_dilate" => w.dilation = pos(nums('x')?)?,
            "lhs_dilate" => {
                if nums('x')?.iter().any(|&d| d != 1) {
                    return with_hint(
                        err_at(
                            inst.line,
                            a.column,
                            "input dilation (`lhs_dilate`, a transposed convolution) is not supported",
                        ),
                        "xla-aot does not compile transposed convolutions yet",
                    );
                }
            }
            "pad" => {
                let mut lo = Vec::new();
                let mut hi = Vec::new();
                for d in v.split('x') {
                    let Some((l, h)) = d.split_once('_') else {
                        return err_at(
                            inst.line,
                            a.column,
                            format!("malformed window padding `{part}`"),
                        );
                    };
                    let p = |s: &str| s.parse::<i64>().ok();
                    match (p(l), p(h)) {
                        (Some(l), Some(h)) => {
                            lo.push(l);
                            hi.push(h);
                        }
                        _ => {
                            return err_at(
                                inst.line,
                                a.column,
                                format!("malformed window padding `{part}`"),
                            );
                        }
                    }
                }
                w.pad_low = pos(lo)?;
                w.pad_high = pos(hi)?;
            }
            _ => {
                return err_at(
                    inst.line,
                    a.column,
                    format!("window field `{k}` is not supported (size, stride, pad, rhs_dilate)"),
                );
            }
        }
    }
    if !seen_size && rank > 0 {
        return err_at(inst.line, a.column, "the window has no `size`");
    }
    Ok(w)
}

/// `{[0:2], [1:3:2]}`.
pub(super) fn parse_slice(
    inst: &RawInst,
    a: &RawAttr,
) -> TResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    let inner = a.value.trim().trim_start_matches('{').trim_end_matches('}');
    let (mut s, mut l, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for (_, part) in split_top(inner) {
        let p = part.trim().trim_start_matches('[').trim_end_matches(']');
        let nums: Option<Vec<usize>> = p.split(':').map(|x| x.trim().parse().ok()).collect();
        match nums.as_deref() {
            Some([a, b]) => {
                s.push(*a);
                l.push(*b);
                t.push(1);
            }
            Some([a, b, c]) => {
                s.push(*a);
                l.push(*b);
                t.push(*c);
            }
            _ => {
                return err_at(
                    inst.line,
                    a.column,
                    format!("malformed slice `{}`", part.trim()),
                );
            }
        }
    }
    Ok((s, l, t))
}

/// `0_0x1_1` (low_high per dim; `_interior` must be 0).
pub(super) fn parse_padding(inst: &RawInst, a: &RawAttr) -> TResult<(Vec<usize>, Vec<usize>)> {
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    let text = a.value.trim();
    if text.is_empty() {
        return Ok((lo, hi));
    }
    for d in text.split('x') {
        let nums: Option<Vec<i64>> = d.split('_').map(|x| x.parse().ok()).collect();
        let Some(nums) = nums else {
            return err_at(inst.line, a.column, format!("malformed padding `{d}`"));
        };
        if nums.len() < 2 || nums.len() > 3 {
            return err_at(inst.line, a.column, format!("malformed padding `{d}`"));
        }
        if nums.get(2).is_some_and(|&i| i != 0) {
            return err_at(inst.line, a.column, "interior padding is not supported");
        }
        if nums[0] < 0 || nums[1] < 0 {
            return with_hint(
                err_at(inst.line, a.column, "negative padding is not supported"),
                "negative padding crops: use a slice",
            );
        }
        lo.push(nums[0] as usize);
        hi.push(nums[1] as usize);
    }
    Ok((lo, hi))
}
