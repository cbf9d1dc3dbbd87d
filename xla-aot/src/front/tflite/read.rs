//! A TFLite flatbuffer decoded into the plain form the lowering walks: the primary subgraph's
//! tensors (shape, element type, constant bytes, quantization) and operators (builtin code,
//! tensor indices, options), every index checked.
//!
//! Contract: [`read`] takes the file's bytes and returns a [`Graph`] or the first problem as a
//! [`SpecError`] that says where: the operator (index and TFLite op name) or the tensor (index
//! and name) or the buffer. Every flatbuffer access goes through the planus readers generated
//! from TFLite's `schema.fbs` (crate `xla-aot-tflite-schema`), which check offsets, lengths,
//! union tags and enum values; their errors are mapped here, nothing panics on any bytes.
//! Checked here: the `TFL3` identifier and schema version 3; one subgraph or more (the first is
//! the model; the others are reached only through control-flow ops, which this importer does not
//! take yet, so more than one is read but not lowered); tensor indices in range (−1 marks an
//! absent optional input); a constant's bytes exactly its element count × element size (offset
//! buffers of models over 2 GB included, read from the file past the flatbuffer); shapes
//! non-negative. Operator options stay planus readers ([`Operator::options`]): each lowering
//! reads the fields it needs through [`pb`].

use crate::front::diag::{SpecError, SpecErrorKind};
use planus::ReadAsRoot;
use std::path::Path;
use xla_aot_tflite_schema::tflite;

/// The schema version this importer reads (`Model.version`; TFLite has written 3 since 2017).
pub const SCHEMA_VERSION: u32 = 3;

/// The file identifier at bytes 4..8 of every TFLite flatbuffer (`file_identifier` in schema.fbs).
pub const FILE_IDENTIFIER: &[u8; 4] = b"TFL3";

/// One tensor of the primary subgraph.
#[derive(Debug, Clone)]
pub struct Tensor<'a> {
    /// The tensor's name in the file (may be empty).
    pub name: String,
    /// Element type.
    pub dtype: tflite::TensorType,
    /// Static shape (`shape`; a scalar has none).
    pub shape: Vec<usize>,
    /// `shape_signature` where the file has one: −1 marks a dim fixed only at run time.
    pub signature: Option<Vec<i32>>,
    /// The constant's bytes (little-endian, row-major), if the tensor has a non-empty buffer.
    pub data: Option<&'a [u8]>,
    /// Quantization parameters, if any are given.
    pub quant: Option<Quant>,
    /// Whether the tensor is a variable (state kept between invocations).
    pub is_variable: bool,
}

/// Affine quantization of a tensor: `real = scale · (q − zero_point)`, one pair per tensor or
/// one per index along `dimension`.
#[derive(Debug, Clone, PartialEq)]
pub struct Quant {
    pub scale: Vec<f32>,
    pub zero_point: Vec<i64>,
    pub dimension: usize,
}

/// One operator of the primary subgraph, in execution order.
#[derive(Clone)]
pub struct Operator<'a> {
    /// Position in the subgraph's operator list.
    pub index: usize,
    /// The builtin operator code (`BuiltinOperator`), or `None` for a custom op.
    pub code: Option<i32>,
    /// TFLite's name of the op (`CONV_2D`), or the custom op's code.
    pub name: String,
    /// Input tensor indices, −1 for an absent optional input.
    pub inputs: Vec<i32>,
    /// Output tensor indices.
    pub outputs: Vec<i32>,
    /// The builtin options, read by the op's lowering.
    pub options: Option<tflite::BuiltinOptionsRef<'a>>,
}

impl Operator<'_> {
    /// `operator #i (NAME)`, the position errors print.
    pub fn describe(&self) -> String {
        format!("operator #{} ({})", self.index, self.name)
    }
}

/// The primary subgraph.
pub struct Graph<'a> {
    pub tensors: Vec<Tensor<'a>>,
    pub operators: Vec<Operator<'a>>,
    /// Input tensor indices, in order.
    pub inputs: Vec<usize>,
    /// Output tensor indices, in order.
    pub outputs: Vec<usize>,
    /// Names of the inputs and outputs in the first signature def, by tensor index, where the file
    /// has one (the names a Keras model's `serving_default` gives them).
    pub signature_names: Vec<(usize, String)>,
}

/// A planus read error in `what` as a model error.
pub fn pb<'p>(path: &'p Path, what: &str) -> impl Fn(planus::Error) -> SpecError + 'p {
    let what = what.to_string();
    move |e| {
        model_error(
            path,
            format!("{what}: the flatbuffer does not decode ({e})"),
        )
    }
}

/// An error in the model file at no particular operator.
pub fn model_error(path: &Path, message: String) -> SpecError {
    SpecError::new(path, SpecErrorKind::Invalid(message))
}

/// Decodes the primary subgraph of the TFLite flatbuffer `bytes`.
pub fn read<'a>(path: &Path, bytes: &'a [u8]) -> Result<Graph<'a>, SpecError> {
    if bytes.len() < 8 || &bytes[4..8] != FILE_IDENTIFIER {
        return Err(model_error(
            path,
            "not a TFLite model: the file lacks the `TFL3` identifier at byte 4".into(),
        )
        .hint("the file may be truncated or not a .tflite flatbuffer; re-convert it (tf.lite.TFLiteConverter)"));
    }
    let model = tflite::ModelRef::read_as_root(bytes).map_err(|e| {
        model_error(
            path,
            format!("not a TFLite model: the flatbuffer does not decode ({e})"),
        )
        .hint("the file may be truncated; re-convert it (tf.lite.TFLiteConverter)")
    })?;
    let version = model.version().map_err(pb(path, "Model.version"))?;
    if version != SCHEMA_VERSION {
        return Err(model_error(
            path,
            format!("TFLite schema version {version}: only version {SCHEMA_VERSION} is read"),
        )
        .hint(
            "re-convert the model with a TensorFlow of the last eight years (it writes version 3)",
        ));
    }
    let codes = read_codes(path, &model)?;
    let buffers = read_buffers(path, &model, bytes)?;
    let subgraphs = model
        .subgraphs()
        .map_err(pb(path, "Model.subgraphs"))?
        .ok_or_else(|| {
            model_error(
                path,
                "not a TFLite model: Model.subgraphs is empty (every model has one)".into(),
            )
        })?;
    let sg = subgraphs
        .get(0)
        .ok_or_else(|| {
            model_error(
                path,
                "not a TFLite model: Model.subgraphs is empty (every model has one)".into(),
            )
        })?
        .map_err(pb(path, "subgraph 0"))?;
    let tensors = read_tensors(path, &sg, &buffers)?;
    let n = tensors.len();
    let index_list = |what: &str, v: Option<planus::Vector<'a, i32>>| {
        let mut out = Vec::new();
        for i in v.iter().flat_map(|v| v.iter()) {
            match usize::try_from(i) {
                Ok(i) if i < n => out.push(i),
                _ => {
                    return Err(model_error(
                        path,
                        format!("{what} names tensor {i}; the subgraph has {n} tensors"),
                    ));
                }
            }
        }
        Ok(out)
    };
    let inputs = index_list(
        "the subgraph's input list",
        sg.inputs().map_err(pb(path, "SubGraph.inputs"))?,
    )?;
    let outputs = index_list(
        "the subgraph's output list",
        sg.outputs().map_err(pb(path, "SubGraph.outputs"))?,
    )?;
    if outputs.is_empty() {
        return Err(model_error(
            path,
            "not a TFLite model: SubGraph.outputs of subgraph 0 is empty (every model has an output)"
                .into(),
        ));
    }
    let mut operators = Vec::new();
    if let Some(ops) = sg.operators().map_err(pb(path, "SubGraph.operators"))? {
        for (index, op) in ops.iter().enumerate() {
            let where_ = format!("operator #{index}");
            let op = op.map_err(pb(path, &where_))?;
            let code_index = op.opcode_index().map_err(pb(path, &where_))? as usize;
            let (code, name) = codes.get(code_index).cloned().ok_or_else(|| {
                model_error(
                    path,
                    format!(
                        "{where_} uses operator code {code_index}; the model lists {}",
                        codes.len()
                    ),
                )
            })?;
            let tensor_list = |what: &str, v: Option<planus::Vector<'a, i32>>| {
                let mut out = Vec::new();
                for i in v.iter().flat_map(|v| v.iter()) {
                    if i < -1 || i64::from(i) >= n as i64 {
                        return Err(model_error(
                            path,
                            format!(
                                "{what} of {where_} ({name}) names tensor {i}; the subgraph has {n} tensors"
                            ),
                        ));
                    }
                    out.push(i);
                }
                Ok(out)
            };
            let inputs = tensor_list("an input", op.inputs().map_err(pb(path, &where_))?)?;
            let outputs = tensor_list("an output", op.outputs().map_err(pb(path, &where_))?)?;
            if outputs.contains(&-1) {
                return Err(model_error(
                    path,
                    format!("{where_} ({name}) has an absent output (tensor −1)"),
                ));
            }
            let options = op.builtin_options().map_err(pb(path, &where_))?;
            operators.push(Operator {
                index,
                code,
                name,
                inputs,
                outputs,
                options,
            });
        }
    }
    let signature_names = read_signature(path, &model, &sg, n)?;
    Ok(Graph {
        tensors,
        operators,
        inputs,
        outputs,
        signature_names,
    })
}

/// The operator codes: builtin code (the larger of the two code fields, as TFLite reads them)
/// and name.
fn read_codes(
    path: &Path,
    model: &tflite::ModelRef<'_>,
) -> Result<Vec<(Option<i32>, String)>, SpecError> {
    let mut out = Vec::new();
    let Some(codes) = model
        .operator_codes()
        .map_err(pb(path, "Model.operator_codes"))?
    else {
        return Ok(out);
    };
    for (i, c) in codes.iter().enumerate() {
        let what = format!("operator code {i}");
        let c = c.map_err(pb(path, &what))?;
        // schema.fbs: `builtin_code` is the new field; older files set only the deprecated int8
        // one (codes below 127), newer files both, and the larger is the code.
        let old = i32::from(c.deprecated_builtin_code().map_err(pb(path, &what))?);
        let new = match c.builtin_code() {
            Ok(b) => b as i32,
            // A code from a newer schema than ours: name it by number.
            Err(_) => {
                return Err(model_error(
                    path,
                    format!("{what} is a builtin operator this importer's schema does not know"),
                )
                .hint("the model needs a newer TFLite than schema.fbs of 2026-08; see docs/import.md for the ops we take"));
            }
        };
        let code = old.max(new);
        if code == tflite::BuiltinOperator::Custom as i32 {
            let custom = c
                .custom_code()
                .map_err(pb(path, &what))?
                .unwrap_or("(unnamed)");
            out.push((None, format!("custom op `{custom}`")));
        } else {
            let name = xla_aot_tflite_schema::builtin_name(code)
                .map(str::to_string)
                .unwrap_or_else(|| format!("builtin op {code}"));
            out.push((Some(code), name));
        }
    }
    Ok(out)
}

/// Every buffer's bytes (`None` for an empty buffer), inline or at an offset past the flatbuffer.
fn read_buffers<'a>(
    path: &Path,
    model: &tflite::ModelRef<'a>,
    bytes: &'a [u8],
) -> Result<Vec<Option<&'a [u8]>>, SpecError> {
    let mut out = Vec::new();
    let Some(buffers) = model.buffers().map_err(pb(path, "Model.buffers"))? else {
        return Ok(out);
    };
    for (i, b) in buffers.iter().enumerate() {
        let what = format!("buffer {i}");
        let b = b.map_err(pb(path, &what))?;
        let offset = b.offset().map_err(pb(path, &what))?;
        let size = b.size().map_err(pb(path, &what))?;
        let data = if offset > 1 {
            // Models over 2 GB keep their buffers after the flatbuffer (schema 3c): offset and
            // size in the file.
            let end = offset.checked_add(size);
            match end {
                Some(end) if end <= bytes.len() as u64 => {
                    Some(&bytes[offset as usize..end as usize])
                }
                _ => {
                    return Err(model_error(
                        path,
                        format!(
                            "{what} lies at bytes {offset}..+{size}, past the end of the {}-byte file",
                            bytes.len()
                        ),
                    )
                    .hint("the file is truncated; copy it again"));
                }
            }
        } else {
            b.data().map_err(pb(path, &what))?
        };
        out.push(data.filter(|d| !d.is_empty()));
    }
    Ok(out)
}

/// Bytes per element of a TFLite type we read, `None` for the others.
pub fn element_size(t: tflite::TensorType) -> Option<usize> {
    use tflite::TensorType as T;
    Some(match t {
        T::Float32 | T::Int32 | T::Uint32 => 4,
        T::Float16 | T::Int16 | T::Uint16 => 2,
        T::Int8 | T::Uint8 | T::Bool => 1,
        T::Int64 | T::Uint64 | T::Float64 => 8,
        _ => return None,
    })
}

fn read_tensors<'a>(
    path: &Path,
    sg: &tflite::SubGraphRef<'a>,
    buffers: &[Option<&'a [u8]>],
) -> Result<Vec<Tensor<'a>>, SpecError> {
    let mut out = Vec::new();
    let Some(tensors) = sg.tensors().map_err(pb(path, "SubGraph.tensors"))? else {
        return Ok(out);
    };
    for (i, t) in tensors.iter().enumerate() {
        let what = format!("tensor {i}");
        let t = t.map_err(pb(path, &what))?;
        let name = t.name().map_err(pb(path, &what))?.unwrap_or("").to_string();
        let what = format!("tensor {i} `{name}`");
        let dtype = t.type_().map_err(|_| {
            model_error(
                path,
                format!("{what} has an element type this importer's schema does not know"),
            )
        })?;
        let mut shape = Vec::new();
        for d in t
            .shape()
            .map_err(pb(path, &what))?
            .iter()
            .flat_map(|v| v.iter())
        {
            let d = usize::try_from(d).map_err(|_| {
                model_error(
                    path,
                    format!("{what} has the negative dim {d} in its shape"),
                )
            })?;
            shape.push(d);
        }
        let signature = t
            .shape_signature()
            .map_err(pb(path, &what))?
            .map(|v| v.iter().collect::<Vec<i32>>());
        let buffer = t.buffer().map_err(pb(path, &what))? as usize;
        let data = match buffers.get(buffer) {
            Some(d) => *d,
            None if buffer == 0 => None,
            None => {
                return Err(model_error(
                    path,
                    format!(
                        "{what} uses buffer {buffer}; the model has {}",
                        buffers.len()
                    ),
                ));
            }
        };
        if let Some(d) = data
            && let Some(size) = element_size(dtype)
        {
            let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let want = count.and_then(|c| c.checked_mul(size));
            if want != Some(d.len()) {
                return Err(model_error(
                    path,
                    format!(
                        "{what}: buffer {buffer} holds {} bytes; its shape {shape:?} of {dtype:?} needs {}",
                        d.len(),
                        want.map_or("more than the address space".to_string(), |w| w.to_string())
                    ),
                )
                .hint("the file is corrupt or was edited; re-convert it"));
            }
        }
        let quant = read_quant(path, &what, &t)?;
        let is_variable = t.is_variable().map_err(pb(path, &what))?;
        out.push(Tensor {
            name,
            dtype,
            shape,
            signature,
            data,
            quant,
            is_variable,
        });
    }
    Ok(out)
}

fn read_quant(
    path: &Path,
    what: &str,
    t: &tflite::TensorRef<'_>,
) -> Result<Option<Quant>, SpecError> {
    let Some(q) = t.quantization().map_err(pb(path, what))? else {
        return Ok(None);
    };
    let scale: Vec<f32> = q
        .scale()
        .map_err(pb(path, what))?
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let zero_point: Vec<i64> = q
        .zero_point()
        .map_err(pb(path, what))?
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if scale.is_empty() {
        return Ok(None);
    }
    let dimension = q.quantized_dimension().map_err(pb(path, what))?;
    let dimension = usize::try_from(dimension)
        .map_err(|_| model_error(path, format!("{what} has quantized_dimension {dimension}")))?;
    if !zero_point.is_empty() && zero_point.len() != scale.len() {
        return Err(model_error(
            path,
            format!(
                "{what} has {} scales and {} zero points",
                scale.len(),
                zero_point.len()
            ),
        ));
    }
    Ok(Some(Quant {
        scale,
        zero_point,
        dimension,
    }))
}

/// The first signature def's input and output names, by tensor index.
fn read_signature(
    path: &Path,
    model: &tflite::ModelRef<'_>,
    _sg: &tflite::SubGraphRef<'_>,
    n: usize,
) -> Result<Vec<(usize, String)>, SpecError> {
    let mut out = Vec::new();
    let Some(defs) = model
        .signature_defs()
        .map_err(pb(path, "Model.signature_defs"))?
    else {
        return Ok(out);
    };
    let Some(def) = defs.get(0) else {
        return Ok(out);
    };
    let def = def.map_err(pb(path, "signature def 0"))?;
    if def.subgraph_index().map_err(pb(path, "signature def 0"))? != 0 {
        return Ok(out);
    }
    for list in [
        def.inputs().map_err(pb(path, "signature def 0"))?,
        def.outputs().map_err(pb(path, "signature def 0"))?,
    ]
    .into_iter()
    .flatten()
    {
        for m in list.iter() {
            let m = m.map_err(pb(path, "signature def 0"))?;
            let name = m.name().map_err(pb(path, "signature def 0"))?;
            let index = m.tensor_index().map_err(pb(path, "signature def 0"))? as usize;
            if let Some(name) = name
                && index < n
            {
                out.push((index, name.to_string()));
            }
        }
    }
    Ok(out)
}
