//! TFLite model (`.tflite` flatbuffer) → HLO module.
//!
//! Contract: [`import`] reads the flatbuffer through the readers generated from TFLite's
//! `schema.fbs` (`read.rs`; a truncated or corrupt file is "not a TFLite model: ..."), lowers the
//! primary subgraph's operators in their order to the primitives of `ir::inst` (`ops.rs` declares
//! each supported op once), and returns a verified-shape module. Inputs become entry parameters
//! in the subgraph's order, named after the first signature def where the file has one (Keras
//! models: `serving_default`'s names), else after their tensors, sanitised into C identifiers
//! and deduplicated; outputs likewise. Shapes are static: each input has the shape written in the
//! file (TFLite's own default for a dim whose `shape_signature` is −1), unless `--input-shape`
//! gives another. Float models import (float32, and float16 or int8 weights behind a DEQUANTIZE),
//! and full-integer int8 models with TFLite Micro's arithmetic bit for bit (`int8.rs`,
//! `int8_tables.rs`; int8 inputs and outputs are `int8_t` at the C API). 16x8 and hybrid models,
//! variables and control flow are errors that name the input or operator and say so. Every error names the operator (`operator #3 (CONV_2D)`) or the tensor;
//! nothing here panics on any input (the fuzz target `tflite_import` checks it).

mod elementwise;
mod gemmlowp;
pub mod int8;
mod int8_products;
mod int8_tables;
pub mod lower;
mod nn;
pub mod ops;
pub mod read;
mod resize;
mod shape_ops;
mod split_stack;
mod transpose_conv;

use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::inputs::InputOverrides;
use crate::front::weights::Bindings;
use crate::ir::{ApiTypes, DType, Module, Shape};
use crate::util::c_name;
use lower::{Importer, Val};
use read::model_error;
use std::collections::HashSet;
use std::path::Path;
use xla_aot_tflite_schema::tflite::TensorType;

/// Imports a TFLite flatbuffer.
pub fn import(
    path: &Path,
    bytes: &[u8],
    name: &str,
    bindings: &mut Bindings,
    overrides: &InputOverrides,
) -> Result<Module, SpecError> {
    let g = read::read(path, bytes)?;
    let mut imp = Importer::new(path, &g, name);
    let sig_name = |t: usize| {
        g.signature_names
            .iter()
            .find(|(i, _)| *i == t)
            .map(|(_, n)| n.clone())
    };
    if !overrides.dims.is_empty() || !overrides.freeze.is_empty() {
        return Err(model_error(
            path,
            "--dim and --freeze do not apply to TFLite models yet: their inputs have no symbolic dims"
                .into(),
        )
        .hint("fix an input's shape with --input-shape NAME=D0xD1x..."));
    }
    let mut input_names = Vec::new();
    let mut api_types = ApiTypes::default();
    let mut used = HashSet::new();
    for (position, &t) in g.inputs.iter().enumerate() {
        let tensor = &g.tensors[t];
        let tflite_name = sig_name(t).unwrap_or_else(|| tensor.name.clone());
        let clean = unique(&c_name::identifier(&tflite_name), &mut used);
        let described = format!("input {position} `{tflite_name}` (tensor {t})");
        let input_err = |m: String| model_error(path, format!("{described}: {m}"));
        let (dtype, api) = match tensor.dtype {
            TensorType::Float32 => (DType::F32, None),
            TensorType::Int32 => (DType::I32, None),
            // Quantized integers: i32 in the IR, their own type at the C API.
            TensorType::Int8 => (DType::I32, Some(DType::I8)),
            TensorType::Uint8 => (DType::I32, Some(DType::U8)),
            TensorType::Int16 if tensor.quant.is_some() => {
                return Err(input_err(
                    "its element type is Int16: 16x8 models (int16 activations, int8 weights) are not supported yet"
                        .into(),
                )
                .hint("convert with int8 activations (the converter's default full-integer mode)"));
            }
            other => {
                return Err(input_err(format!(
                    "its element type is {other:?}; run-time inputs must be float32, int32, int8 or uint8"
                )));
            }
        };
        let dims = match overrides
            .shape_of(&tflite_name, position)
            .or_else(|| overrides.shape_of(&clean, position))
        {
            Some(d) => d.to_vec(),
            None => tensor.shape.clone(),
        };
        if dims.contains(&0) {
            return Err(input_err(format!(
                "its shape {dims:?} has an empty dim; a model's inputs hold at least one element"
            ))
            .hint("fix the shape with --input-shape NAME=D0xD1x..."));
        }
        let shape = Shape::new(dtype, dims);
        input_names.push(clean.clone());
        if let Some(lit) = bindings.take(&[tflite_name.as_str(), clean.as_str()], &shape) {
            let lit = lit.map_err(|m| SpecError::new(path, SpecErrorKind::Weight(m)))?;
            let rank = lit.dims.len();
            let id = imp.b.constant(&clean, lit);
            imp.set(t, Val::plain(id, rank));
            continue;
        }
        let rank = shape.dims.len();
        let id = imp
            .b
            .parameter(&clean, shape)
            .map_err(|m| input_err(m).hint("fix a smaller input shape with --input-shape"))?;
        api_types.inputs.push(api);
        imp.set(t, Val::plain(id, rank));
    }
    if let Some(m) = overrides.unmatched(&input_names, &[]) {
        return Err(model_error(path, m));
    }
    for t in &g.tensors {
        if t.is_variable {
            return Err(model_error(
                path,
                format!(
                    "tensor `{}` is a variable (state kept between calls); stateful TFLite models are not imported yet",
                    t.name
                ),
            ));
        }
    }
    for op in &g.operators {
        imp.enter(op);
        let decl = ops::find(&op.name).ok_or_else(|| unsupported(path, op))?;
        (decl.lower)(&mut imp)?;
        for &o in &op.outputs {
            if imp.val_of(o as usize).is_none() {
                return Err(imp.err(format!(
                    "output {} is not produced by the lowering (please report this)",
                    imp.tensor_name(o as usize)
                )));
            }
        }
    }
    if g.outputs.is_empty() {
        return Err(model_error(path, "the subgraph has no outputs".into()));
    }
    let mut out_names = HashSet::new();
    for &t in &g.outputs {
        let tflite_name = sig_name(t).unwrap_or_else(|| g.tensors[t].name.clone());
        // A quantized output held as f32 integers stays f32, passed as its byte at the C API
        // (`ir/api_types.rs` `output_bytes`): the dense layer or convolution writing it keeps
        // its requantization in its epilogue, which an i32 result would end.
        let v = match imp.held_f32(t) {
            Some(v) => v,
            None => imp
                .val(t)
                .map_err(|e| model_error(path, format!("output `{tflite_name}`: {}", e.kind())))?,
        };
        let id = imp.plain(&v)?;
        let oname = unique(&c_name::identifier(&tflite_name), &mut out_names);
        imp.b.output(&oname, id);
        let int = matches!(imp.dtype(id), DType::I32 | DType::F32);
        api_types.outputs.push(match g.tensors[t].dtype {
            TensorType::Int8 if int => Some(DType::I8),
            TensorType::Uint8 if int => Some(DType::U8),
            _ => None,
        });
    }
    let mut m = imp.finish();
    if !api_types.is_empty() {
        m.api = api_types;
    }
    Ok(m)
}

/// The error for an operator no lowering takes.
fn unsupported(path: &Path, op: &read::Operator<'_>) -> SpecError {
    let e = model_error(
        path,
        format!("{} is not supported by the TFLite importer", op.name),
    )
    .in_node(op.describe());
    match ops::closest(&op.name) {
        Some(c) => e.hint(format!(
            "did you mean {c}? docs/import.md lists the TFLite ops that import"
        )),
        None => e.hint("docs/import.md lists the TFLite ops that import"),
    }
}

/// `base`, or `base_2`, `base_3`, ... if taken.
fn unique(base: &str, used: &mut HashSet<String>) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while !used.insert(name.clone()) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}
