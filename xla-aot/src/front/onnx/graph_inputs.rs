//! The shape of each run-time graph input, and frozen inputs, under the build's
//! [`InputOverrides`].
//!
//! Contract: [`input_dims`] returns an input's static dims: `--input-shape` replaces the declared
//! shape (same rank; a declared static dim must agree), `--dim SYMBOL=N` fixes every dim named
//! `SYMBOL`; a dim still symbolic or unknown is an error naming the input, the dim and the flag
//! that fixes it. [`frozen_tensor`] builds the compile-time tensor of a frozen input in the
//! input's element type. [`symbols`] lists the symbolic dims of the graph's inputs (to report a
//! `--dim` that names none). [`api_dtype`] is the C API dtype of a graph input or output whose ONNX
//! element type the module computes in another dtype (int64 in i32, float16 in f32, ...).

use super::proto::{ValueInfoProto, data_type as dt, tensor_shape_proto, type_proto};
use super::tensor::{ConstTensor, Values, is_float_type, is_int_type};
use crate::front::inputs::{Frozen, InputOverrides};

/// The C API dtype of a run-time graph input or output of ONNX element type `elem`, when the
/// module computes it in another dtype (`ir/api.rs`); `None` for float32, int32 and bool.
pub fn api_dtype(elem: i32) -> Option<crate::ir::DType> {
    use crate::ir::DType;
    match elem {
        dt::INT64 => Some(DType::I64),
        dt::UINT8 => Some(DType::U8),
        dt::INT8 => Some(DType::I8),
        dt::INT16 => Some(DType::I16),
        dt::UINT16 => Some(DType::U16),
        dt::UINT32 => Some(DType::U32),
        dt::UINT64 => Some(DType::U64),
        dt::FLOAT16 => Some(DType::F16),
        dt::BFLOAT16 => Some(DType::BF16),
        _ => None,
    }
}

/// The ONNX element type declared for `vi`, if any.
pub fn elem_type(vi: &ValueInfoProto) -> Option<i32> {
    tensor_type(vi).map(|tt| tt.elem_type).filter(|&t| t != 0)
}

fn tensor_type(vi: &ValueInfoProto) -> Option<&type_proto::Tensor> {
    match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(tt)) => Some(tt),
        _ => None,
    }
}

/// The symbolic dims (`dim_param`) of `inputs`, in order of first appearance.
pub fn symbols<'a>(inputs: impl Iterator<Item = &'a ValueInfoProto>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for vi in inputs {
        let dims = tensor_type(vi)
            .and_then(|tt| tt.shape.as_ref())
            .map(|s| s.dim.as_slice())
            .unwrap_or(&[]);
        for d in dims {
            if let Some(tensor_shape_proto::dimension::Value::DimParam(p)) = &d.value {
                if !p.is_empty() && !out.contains(p) {
                    out.push(p.clone());
                }
            }
        }
    }
    out
}

/// The static dims of graph input `vi` (at `position` among the run-time inputs).
pub fn input_dims(
    vi: &ValueInfoProto,
    position: usize,
    o: &InputOverrides,
) -> Result<Vec<usize>, (String, Option<String>)> {
    use tensor_shape_proto::dimension::Value as D;
    let declared = tensor_type(vi).and_then(|tt| tt.shape.as_ref());
    let fix_flag = || {
        format!(
            "fix it at build time: --input-shape {}=D0,D1,... (or `input_shapes:` under `graph:` in a spec)",
            vi.name
        )
    };
    if let Some(shape) = o.shape_of(&vi.name, position) {
        if let Some(decl) = declared {
            if decl.dim.len() != shape.len() {
                return Err((
                    format!(
                        "--input-shape gives {} dims, but the input has rank {}",
                        shape.len(),
                        decl.dim.len()
                    ),
                    None,
                ));
            }
            for (i, (d, &n)) in decl.dim.iter().zip(shape).enumerate() {
                if let Some(D::DimValue(v)) = &d.value {
                    if *v >= 0 && *v as usize != n {
                        return Err((
                            format!(
                                "--input-shape sets dimension {i} to {n}, but the model fixes it at {v}"
                            ),
                            Some("re-export the model with that dimension dynamic".into()),
                        ));
                    }
                }
            }
        }
        return Ok(shape.to_vec());
    }
    let Some(decl) = declared else {
        return Err(("its shape is unknown".into(), Some(fix_flag())));
    };
    let mut dims = Vec::with_capacity(decl.dim.len());
    for (i, d) in decl.dim.iter().enumerate() {
        match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => dims.push(*v as usize),
            Some(D::DimParam(p)) if !p.is_empty() => match o.dim(p) {
                Some(n) => dims.push(n),
                None => {
                    return Err((
                        format!("dimension {i} is symbolic (`{p}`)"),
                        Some(format!(
                            "fix it at build time: --dim {p}=N (every dim named `{p}`), or --input-shape {}=D0,D1,... (in a spec: `dims:` or `input_shapes:` under `graph:`)",
                            vi.name
                        )),
                    ));
                }
            },
            _ => {
                return Err((format!("dimension {i} is unknown"), Some(fix_flag())));
            }
        }
    }
    Ok(dims)
}

/// The compile-time tensor of a frozen input of ONNX element type `elem` and `dims`.
pub fn frozen_tensor(frozen: &Frozen, elem: i32, dims: &[usize]) -> Result<ConstTensor, String> {
    let count: usize = dims.iter().product();
    let (given_dims, values): (Vec<usize>, Vec<f64>) = match frozen {
        Frozen::Values(v) if v.len() == 1 => (dims.to_vec(), vec![v[0]; count]),
        Frozen::Values(v) if v.len() == count => (dims.to_vec(), v.clone()),
        Frozen::Values(v) => {
            return Err(format!(
                "--freeze gives {} values, but the input has {count} elements (one value fills it)",
                v.len()
            ));
        }
        Frozen::File(path) => {
            let bytes = crate::util::io::read_bounded(
                path,
                crate::limits::MAX_WEIGHT_FILE_BYTES,
                "MAX_WEIGHT_FILE_BYTES",
            )
            .map_err(|e| {
                format!(
                    "--freeze: cannot read {}: {}",
                    path.display(),
                    crate::util::io::io_reason(&e)
                )
            })?;
            let lit = crate::ir::npy::read_npy(&bytes)
                .map_err(|e| format!("--freeze: {}: {e}", path.display()))?;
            (lit.dims.clone(), lit.to_f64_vec())
        }
        Frozen::Literal(lit) => (lit.dims.clone(), lit.to_f64_vec()),
    };
    if given_dims != dims {
        return Err(format!(
            "--freeze gives a tensor of shape {:?}, but the input's shape is {dims:?}",
            given_dims
        ));
    }
    let values = if is_float_type(elem) {
        Values::F(values)
    } else if is_int_type(elem) {
        if let Some(x) = values.iter().find(|x| x.fract() != 0.0 || !x.is_finite()) {
            return Err(format!(
                "--freeze: {x} is not an integer, and the input is {}",
                dt::name(elem)
            ));
        }
        Values::I(values.iter().map(|&x| x as i64).collect())
    } else if elem == dt::BOOL {
        Values::B(values.iter().map(|&x| x != 0.0).collect())
    } else {
        return Err(format!(
            "--freeze: inputs of element type {} cannot be frozen",
            dt::name(elem)
        ));
    };
    Ok(ConstTensor {
        ty: elem,
        dims: dims.to_vec(),
        values,
    })
}
