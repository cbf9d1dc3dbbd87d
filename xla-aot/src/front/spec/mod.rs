//! The model spec front end: YAML + weights → a verified HLO module.
//!
//! Contract: [`lower_spec`] takes the text of a spec file, checks everything a user can get wrong
//! (syntax, names, dtypes, shapes, attributes, weights) and returns a [`Model`] whose module
//! passes the verifier, or the first [`SpecError`], positioned in the file. It never panics on
//! any input. Files: `raw` (serde structure), `lower/` (ops → HLO), `batch` and `seq` (buckets);
//! positions, weights, names and errors are the shared `front` modules.

pub mod batch;
pub mod lower;
pub mod raw;
pub mod seq;

pub use lower::{OPS, UNARY_OPS, op_kinds};

use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::model::Model;
use crate::front::names::{check_model_name, is_tensor_name, model_name_rule};
use crate::front::spans::SpanIndex;
use crate::front::weights::WeightStore;
use crate::ir::shape::{MAX_ELEMENTS, checked_element_count, dims_str};
use crate::ir::{Builder, DType, Shape, verify};
use crate::util::suggest::nearest;
use lower::{Defined, Lowerer, OpDecl, Origin, describe, literal_from_values};
use serde_yaml::Value;
use std::collections::HashMap;
use std::path::Path;

/// Largest inline constant: inline values are for scalars and small tables; weights belong in
/// `params`, where they are not parsed as YAML text (4096 elements ≈ a 64x64 matrix).
pub const MAX_INLINE_CONSTANT_ELEMENTS: usize = 4096;

fn parse_dtype(s: &str) -> Result<DType, (SpecErrorKind, Option<String>)> {
    match DType::from_name(s) {
        Some(d @ (DType::F32 | DType::I32)) => Ok(d),
        Some(d) => Err((
            SpecErrorKind::UnsupportedDtype(d.name().into()),
            Some("use f32 (or i32 for indices; u8, i8, f16 and bf16 for inputs)".into()),
        )),
        None => {
            let hint = nearest(s, ["f32", "i32"]).map(|n| format!("did you mean `{n}`?"));
            Err((
                SpecErrorKind::Invalid(format!("unknown dtype `{s}`")),
                hint.or(Some("dtypes: f32, i32".into())),
            ))
        }
    }
}

/// Checks and lowers the text of a native spec (no `graph:` key; `path` is used for messages and
/// to find weights).
pub fn lower_spec(path: &Path, source: &str) -> Result<Model, SpecError> {
    let raw = raw::parse_raw(path, source)?;
    match (raw.batch_sizes.clone(), raw.seq_buckets.clone()) {
        (None, None) => lower_raw(path, source, &raw),
        (Some(sizes), None) => batch::lower_buckets(path, source, &raw, &sizes),
        (None, Some(seq)) => seq::lower_buckets(path, source, &raw, &seq),
        (Some(_), Some(_)) => {
            let spans = SpanIndex::build(source);
            Err(SpecError::new(
                path,
                SpecErrorKind::Invalid(
                    "a spec has `batch_sizes` or `seq_buckets`, not both".into(),
                ),
            )
            .at(spans.find("seq_buckets"), source)
            .hint("compile one library per batch size, or bucket the batch only"))
        }
    }
}

/// Checks and lowers a parsed spec (one batch size).
fn lower_raw(path: &Path, source: &str, raw: &raw::RawSpec) -> Result<Model, SpecError> {
    let spans = SpanIndex::build(source);
    let at = |p: &str, kind: SpecErrorKind| SpecError::new(path, kind).at(spans.find(p), source);

    if let Err(hint) = check_model_name(&raw.name) {
        return Err(at("name", SpecErrorKind::BadName(raw.name.clone()))
            .expected(model_name_rule())
            .hint(hint));
    }

    let params_path = raw
        .params
        .as_ref()
        .map(|p| path.parent().unwrap_or(Path::new(".")).join(p));
    let weights = match &params_path {
        None => WeightStore::empty(),
        Some(p) => WeightStore::open(p).map_err(|m| {
            at("params", SpecErrorKind::Weight(m))
                .hint("`params` is resolved relative to the spec file; it names a .safetensors file or a directory of .npy files")
        })?,
    };

    // Names: unique across inputs, constants, ops and weights.
    let mut first: HashMap<String, (usize, &'static str)> = HashMap::new();
    let mut claim = |name: &str, p: &str, what: &'static str| -> Result<(), SpecError> {
        if !is_tensor_name(name) {
            return Err(at(p, SpecErrorKind::BadName(name.to_string()))
                .expected("a tensor name matching [A-Za-z_][A-Za-z0-9_.]*"));
        }
        let line = spans.find(p).map_or(0, |x| x.line);
        if let Some(&(first_line, _)) = first.get(name) {
            return Err(at(
                p,
                SpecErrorKind::Duplicate {
                    name: name.to_string(),
                    first_line,
                },
            )
            .hint("every input, constant and op needs its own name"));
        }
        if weights.contains(name) {
            return Err(at(
                p,
                SpecErrorKind::Duplicate {
                    name: name.to_string(),
                    first_line: line,
                },
            )
            .hint(format!(
                "`{name}` is also a tensor in the params file; rename the {what}"
            )));
        }
        first.insert(name.to_string(), (line, what));
        Ok(())
    };

    let mut lw = Lowerer {
        file: path,
        source,
        spans: &spans,
        weights: &weights,
        b: Builder::new(&raw.name),
        env: HashMap::new(),
        later_ops: HashMap::new(),
        dequantized: HashMap::new(),
    };

    if raw.inputs.is_empty() {
        return Err(at(
            "inputs",
            SpecErrorKind::Invalid("the model has no inputs".into()),
        )
        .expected("at least one input {name, dtype, shape}"));
    }
    // Half-precision inputs are passed as such at the C API and computed in f32 (`ir/api.rs`).
    let mut api_inputs: Vec<Option<DType>> = Vec::new();
    for (i, input) in raw.inputs.iter().enumerate() {
        let p = format!("inputs[{i}]");
        claim(&input.name, &format!("{p}.name"), "input")?;
        let (dtype, api) = match DType::from_name(&input.dtype) {
            Some(h @ (DType::F16 | DType::BF16)) => (DType::F32, Some(h)),
            // Quantized inputs: their integers, computed in i32 (`dequantize` reads them).
            Some(q @ (DType::U8 | DType::I8)) => (DType::I32, Some(q)),
            _ => (
                parse_dtype(&input.dtype)
                    .map_err(|(k, h)| at(&format!("{p}.dtype"), k).maybe_hint(h))?,
                None,
            ),
        };
        api_inputs.push(api);
        let dims = check_dims(&input.shape).map_err(|(j, k)| at(&format!("{p}.shape[{j}]"), k))?;
        let line = spans.find(&p).map_or(0, |x| x.line);
        let id =
            lw.b.parameter(&input.name, Shape::new(dtype, dims))
                .map_err(|m| at(&p, SpecErrorKind::DimensionOverflow(m)))?;
        lw.env.insert(
            input.name.clone(),
            Defined {
                id,
                origin: Origin::Input,
                line,
            },
        );
    }

    for (i, c) in raw.constants.iter().enumerate() {
        let p = format!("constants[{i}]");
        claim(&c.name, &format!("{p}.name"), "constant")?;
        let dtype = match &c.dtype {
            None => DType::F32,
            Some(s) => {
                parse_dtype(s).map_err(|(k, h)| at(&format!("{p}.dtype"), k).maybe_hint(h))?
            }
        };
        let values: Vec<f64> = match &c.value {
            Value::Sequence(seq) => seq
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    v.as_f64().ok_or_else(|| {
                        at(
                            &format!("{p}.value[{j}]"),
                            SpecErrorKind::Invalid(format!(
                                "constant value {} is not a number",
                                describe(v)
                            )),
                        )
                        .hint("inline constants are a number or a flat list of numbers (row-major)")
                    })
                })
                .collect::<Result<_, _>>()?,
            v => vec![v.as_f64().ok_or_else(|| {
                at(
                    &format!("{p}.value"),
                    SpecErrorKind::Invalid(format!(
                        "constant value {} is not a number",
                        describe(v)
                    )),
                )
                .hint("inline constants are a number or a flat list of numbers (row-major)")
            })?],
        };
        if values.len() > MAX_INLINE_CONSTANT_ELEMENTS {
            return Err(at(&format!("{p}.value"), SpecErrorKind::Invalid(format!(
                "inline constant `{}` has {} elements; at most {MAX_INLINE_CONSTANT_ELEMENTS} are allowed inline",
                c.name,
                values.len()
            )))
            .hint("put large tensors in the `params` file"));
        }
        if dtype == DType::I32
            && values
                .iter()
                .any(|v| v.fract() != 0.0 || *v < i32::MIN as f64 || *v > i32::MAX as f64)
        {
            return Err(at(
                &format!("{p}.value"),
                SpecErrorKind::Invalid(format!(
                    "i32 constant `{}` holds a value that is not a 32-bit integer",
                    c.name
                )),
            ));
        }
        let is_list = matches!(c.value, Value::Sequence(_));
        let (dims, values) = match &c.shape {
            None if is_list => (vec![values.len()], values),
            None => (Vec::new(), values),
            Some(shape) => {
                let dims = check_dims(shape).map_err(|(j, k)| at(&format!("{p}.shape[{j}]"), k))?;
                let n: usize = dims.iter().product();
                if n > MAX_INLINE_CONSTANT_ELEMENTS {
                    return Err(at(&format!("{p}.shape"), SpecErrorKind::Invalid(format!(
                        "inline constant `{}` of shape {} has {n} elements; at most {MAX_INLINE_CONSTANT_ELEMENTS} are allowed inline",
                        c.name,
                        dims_str(&dims)
                    )))
                    .hint("put large tensors in the `params` file"));
                }
                if values.len() == 1 && !is_list {
                    (dims, vec![values[0]; n])
                } else if values.len() == n {
                    (dims, values)
                } else {
                    return Err(at(
                        &format!("{p}.value"),
                        SpecErrorKind::Invalid(format!(
                            "constant `{}` has {} value(s) but shape {} needs {n}",
                            c.name,
                            values.len(),
                            dims_str(&dims)
                        )),
                    ));
                }
            }
        };
        let line = spans.find(&p).map_or(0, |x| x.line);
        let id =
            lw.b.constant(&c.name, literal_from_values(dtype, dims, &values));
        lw.env.insert(
            c.name.clone(),
            Defined {
                id,
                origin: Origin::Constant,
                line,
            },
        );
    }

    if raw.ops.is_empty() {
        return Err(
            at("ops", SpecErrorKind::Invalid("the model has no ops".into()))
                .expected("at least one op"),
        );
    }
    let mut decls = Vec::with_capacity(raw.ops.len());
    for (i, m) in raw.ops.iter().enumerate() {
        let d = decode_op(path, source, &spans, i, m)?;
        claim(&d.name, &format!("ops[{i}].name"), "op")?;
        lw.later_ops.insert(d.name.clone(), i);
        decls.push(d);
    }
    for d in &decls {
        let id = lw.lower_op(d)?;
        let line = spans
            .find(&format!("ops[{}]", d.index))
            .map_or(0, |x| x.line);
        lw.env.insert(
            d.name.clone(),
            Defined {
                id,
                origin: Origin::Op,
                line,
            },
        );
    }

    if raw.outputs.is_empty() {
        return Err(at(
            "outputs",
            SpecErrorKind::Invalid("the model has no outputs".into()),
        )
        .expected("a list of op names"));
    }
    let mut seen = HashMap::new();
    let mut outputs = Vec::new();
    for (i, o) in raw.outputs.iter().enumerate() {
        let p = format!("outputs[{i}]");
        if seen.insert(o.clone(), i).is_some() {
            return Err(at(
                &p,
                SpecErrorKind::Invalid(format!("output `{o}` is listed twice")),
            ));
        }
        match lw.env.get(o) {
            Some(def) if def.origin == Origin::Op => outputs.push((o.clone(), def.id)),
            Some(def) => {
                let what = match def.origin {
                    Origin::Input => "a model input",
                    Origin::Constant => "a constant",
                    _ => "a weight",
                };
                return Err(at(&p, SpecErrorKind::OutputNeverProduced(o.clone()))
                    .hint(format!("`{o}` is {what}; outputs must be results of ops")));
            }
            None => {
                let ops: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
                let hint = nearest(o, ops.iter().copied()).map(|s| format!("did you mean `{s}`?"));
                return Err(at(&p, SpecErrorKind::OutputNeverProduced(o.clone()))
                    .expected("the name of an op")
                    .maybe_hint(hint));
            }
        }
    }
    // A `quantize` result that is a model output reaches the caller in its `dtype` (u8 or i8).
    let api_outputs: Vec<Option<DType>> = outputs
        .iter()
        .map(|(name, _)| {
            let d = decls.iter().find(|d| &d.name == name)?;
            if d.kind != "quantize" {
                return None;
            }
            let dt = d.attr("dtype").and_then(|v| v.as_str()).unwrap_or("u8");
            lower::q_range(dt).map(|(_, _, t)| t)
        })
        .collect();
    let mut b = lw.b;
    for (name, id) in outputs {
        b.output(&name, id);
    }
    let mut module = b.finish();
    if api_inputs.iter().any(Option::is_some) || api_outputs.iter().any(Option::is_some) {
        module.api.inputs = api_inputs;
        module.api.outputs = api_outputs;
    }
    if let Some(p) = &raw.precision {
        module.precision = crate::ir::Precision::parse(p)
            .map_err(|m| at("precision", SpecErrorKind::Invalid(m)))?;
    }
    verify(&module).map_err(|e| {
        SpecError::new(path, SpecErrorKind::Invalid(format!(
            "internal compiler error: the lowered module fails verification (please report this): {e}"
        )))
    })?;
    Ok(Model::single(module, path.to_path_buf(), params_path, None))
}

/// Checks a shape list: every dim positive, the element count within bounds.
fn check_dims(shape: &[i64]) -> Result<Vec<usize>, (usize, SpecErrorKind)> {
    for (j, &d) in shape.iter().enumerate() {
        if d <= 0 {
            return Err((
                j,
                SpecErrorKind::Invalid(format!(
                    "dimension {d} is not positive; every dimension must be >= 1"
                )),
            ));
        }
    }
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    if let Err(e) = crate::ir::shape::check_rank(&dims) {
        return Err((crate::limits::MAX_RANK, SpecErrorKind::Invalid(e)));
    }
    if checked_element_count(&dims).is_none() {
        return Err((
            0,
            SpecErrorKind::DimensionOverflow(format!(
                "shape {shape:?} has more than {MAX_ELEMENTS} elements"
            )),
        ));
    }
    Ok(dims)
}

fn decode_op(
    path: &Path,
    source: &str,
    spans: &SpanIndex,
    i: usize,
    m: &serde_yaml::Mapping,
) -> Result<OpDecl, SpecError> {
    let p = format!("ops[{i}]");
    let at = |q: &str, kind: SpecErrorKind| SpecError::new(path, kind).at(spans.find(q), source);
    let mut name = None;
    let mut kind = None;
    let mut inputs = None;
    let mut attrs = Vec::new();
    for (k, v) in m {
        let Some(key) = k.as_str() else {
            return Err(at(
                &p,
                SpecErrorKind::Invalid(format!("op keys must be strings, found {}", describe(k))),
            ));
        };
        let q = format!("{p}.{key}");
        let string = |v: &Value, what: &str| -> Result<String, SpecError> {
            v.as_str().map(str::to_string).ok_or_else(|| {
                at(
                    &q,
                    SpecErrorKind::Invalid(format!(
                        "`{key}` must be {what}, found {}",
                        describe(v)
                    )),
                )
            })
        };
        match key {
            "name" => name = Some(string(v, "a string")?),
            "op" => kind = Some(string(v, "a string (the op kind, e.g. conv2d)")?),
            "inputs" => {
                let Some(seq) = v.as_sequence() else {
                    return Err(at(
                        &q,
                        SpecErrorKind::Invalid(format!(
                            "`inputs` must be a list of tensor names, found {}",
                            describe(v)
                        )),
                    )
                    .hint("write inputs: [x] even for a single input"));
                };
                let mut names = Vec::new();
                for (j, item) in seq.iter().enumerate() {
                    match item.as_str() {
                        Some(s) => names.push(s.to_string()),
                        None => {
                            return Err(at(
                                &format!("{q}[{j}]"),
                                SpecErrorKind::Invalid(format!(
                                    "an input must be a tensor name, found {}",
                                    describe(item)
                                )),
                            ));
                        }
                    }
                }
                inputs = Some(names);
            }
            _ => attrs.push((key.to_string(), v.clone())),
        }
    }
    let missing = |key: &str| {
        at(
            &p,
            SpecErrorKind::MissingKey {
                key: key.to_string(),
                context: format!("op #{}", i + 1),
            },
        )
        .expected("{name: ..., op: ..., inputs: [...], <attributes>}")
    };
    Ok(OpDecl {
        index: i,
        name: name.ok_or_else(|| missing("name"))?,
        kind: kind.ok_or_else(|| missing("op"))?,
        inputs: inputs.ok_or_else(|| missing("inputs"))?,
        attrs,
    })
}
