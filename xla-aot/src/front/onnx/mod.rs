//! ONNX model → HLO module.
//!
//! Contract: [`import`] decodes a serialised `ModelProto` with `prost` (a truncated or corrupt
//! file is "not an ONNX model: ..."), checks the default-domain opset ([`MIN_OPSET`] to
//! [`MAX_OPSET`]), and lowers the graph node by node to the primitives of `ir::inst`, each op read
//! in the signature of the model's opset; nodes of domain `com.microsoft` (onnxruntime's fusions)
//! are rewritten into default-domain ones (`contrib.rs`), nodes of any other domain are errors
//! naming it. Control flow (`If`, `Loop`, `Scan`) is resolved or unrolled at import time
//! (`control.rs`, `loops.rs`). Graph inputs that are not initializers become entry
//! parameters (in graph order, names sanitised into C identifiers and deduplicated) unless a
//! weight or an [`ImportOptions::constants`] tensor binds them, in which case they become
//! constants; initializers are constants, also when listed as graph inputs (as IR 3 requires),
//! unless [`ImportOptions::initializers_as_inputs`] keeps those as inputs. Graph outputs keep their
//! names the same way. Shapes are static: every input dim must be known. Values the importer needs
//! at import time (Reshape's shape, Slice's starts, axes, pads, ...) must be compile-time constants:
//! initializers, `Constant`/`ConstantOfShape` results, `Shape` of a static shape, or integer
//! arithmetic on those, which is folded here ([`tensor::ConstTensor`]). Integers live in i32 at run
//! time, floats in f32: an input or output of element type int64, int16, int8, uint32, uint16,
//! uint8, float16 or bfloat16
//! keeps that type at the C API, converted at the call (`ir/api.rs`). Every error names the node (index, name, op_type),
//! says what is unsupported and, where possible, how to fix it. Nothing here panics on any input.
//! The op set and its limits are listed in `docs/import.md`.

mod attention;
mod bf16_graph;
mod bitshift;
mod context;
mod contrib;
mod contrib_attention;
mod control;
mod conv_transpose;
mod crop_select;
mod dispatch;
mod einsum;
mod elementwise;
mod generate;
mod graph_inputs;
mod grid_sample;
mod indexing;
mod loops;
mod loss;
mod nn;
mod norms;
pub mod proto;
mod qdq;
mod qlinear_exact;
mod quant;
mod reduce;
mod resize;
mod rewrite;
mod rnn;
mod rotary;
mod scatter;
mod scatter_rt;
mod shape_ops;
mod spectral;
mod tensor;
mod trig;

use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::inputs::InputOverrides;
use crate::front::weights::{Bindings, WeightStore};
use crate::ir::{Builder, Literal, Module, Shape};
use crate::util::c_name;
use context::{Ctx, Importer, Val};
use prost::Message;
use proto::{ModelProto, TensorProto, data_type as dt, type_proto};
use std::collections::{HashMap, HashSet};
use std::path::Path;
pub use tensor::ConstTensor;

/// Oldest default-domain opset we import: opset 7 gave the arithmetic ops numpy broadcasting
/// (before it, `broadcast`/`axis` attributes) and dropped BatchNormalization's and Dropout's
/// `is_test`. Between 7 and 13 the signatures changed op by op (attributes became inputs, Softmax
/// lost its 2-D coercion); each lowering reads the form of the model's opset ([`Ctx::before`]).
pub const MIN_OPSET: i64 = 7;
/// Newest default-domain opset we import (ONNX 1.23). Versions 22 to 28 of the ops we support
/// only add element types (bfloat16, float8, int4, ...) that we reject per tensor anyway.
pub const MAX_OPSET: i64 = 28;

/// Options of [`import_with`].
#[derive(Debug, Default, Clone)]
pub struct ImportOptions {
    /// Graph inputs to bind to these tensors, by graph name: they become compile-time constants
    /// (as initializers are), so an input such as Reshape's `shape` can be fed by a test.
    pub constants: HashMap<String, TensorProto>,
    /// Input shapes, symbolic dims and frozen inputs fixed by the build (`front/inputs.rs`).
    pub inputs: InputOverrides,
    /// Keep initializers that are also listed as graph inputs as run-time inputs (ONNX's meaning
    /// from IR version 4: the initializer is a default the caller may override). Off by default:
    /// IR 3 lists every initializer as a graph input (it required that), and exporters of IR 4+
    /// that still list them nearly always mean weights, so they are constants.
    pub initializers_as_inputs: bool,
}

/// Imports a serialised ONNX `ModelProto`.
pub fn import(
    path: &Path,
    bytes: &[u8],
    name: &str,
    bindings: &mut Bindings,
) -> Result<Module, SpecError> {
    import_with(path, bytes, name, bindings, &ImportOptions::default())
}

/// Imports with weight bindings and options, then verifies the module (as `front::load_file`
/// does); for tools and tests.
pub fn import_file_with(
    path: &Path,
    bytes: &[u8],
    name: &str,
    options: &ImportOptions,
) -> Result<Module, SpecError> {
    let weights = WeightStore::empty();
    let mut bindings = Bindings::new(&weights);
    let m = import_with(path, bytes, name, &mut bindings, options)?;
    crate::ir::verify(&m).map_err(|e| {
        SpecError::new(
            path,
            SpecErrorKind::Invalid(format!(
                "internal compiler error: the imported module fails verification (please report this): {e}"
            )),
        )
    })?;
    Ok(m)
}

/// Decodes one serialised `TensorProto` (a `.pb` file of the ONNX test data) as a
/// compile-time tensor.
pub fn decode_tensor(bytes: &[u8]) -> Result<(String, ConstTensor), String> {
    let t = TensorProto::decode(bytes).map_err(|e| format!("not an ONNX TensorProto: {e}"))?;
    let c = ConstTensor::from_proto(&t)?;
    Ok((t.name, c))
}

fn model_error(path: &Path, msg: String) -> SpecError {
    SpecError::new(path, SpecErrorKind::Invalid(msg))
}

/// Imports with options (see [`ImportOptions`]).
pub fn import_with(
    path: &Path,
    bytes: &[u8],
    name: &str,
    bindings: &mut Bindings,
    options: &ImportOptions,
) -> Result<Module, SpecError> {
    let mut model = ModelProto::decode(bytes).map_err(|e| {
        model_error(path, format!("not an ONNX model: the protobuf does not decode ({e})"))
            .hint("the file may be truncated or not an .onnx file; re-export it (torch.onnx.export, tf2onnx)")
    })?;
    let Some(graph) = model.graph.as_mut() else {
        return Err(model_error(
            path,
            "not an ONNX model: the ModelProto has no graph".into(),
        ));
    };
    let mut opset = None;
    for o in &model.opset_import {
        if o.domain.is_empty() || o.domain == "ai.onnx" {
            opset = Some(o.version);
        }
    }
    // No opset import at all means opset 1 (IR 1 and 2 had none); imports of other domains
    // only mean the model uses no default-domain op we could read.
    if opset.is_none() && !model.opset_import.is_empty() {
        let domains: Vec<&str> = model
            .opset_import
            .iter()
            .map(|o| o.domain.as_str())
            .collect();
        return Err(model_error(
            path,
            format!(
                "the model imports no opset of the default ONNX domain (only {}); opsets {MIN_OPSET} to {MAX_OPSET} of the default domain are supported",
                domains.join(", ")
            ),
        )
        .hint("only the default domain's ops are supported (not ai.onnx.ml, ai.onnx.preview.training, ...)"));
    }
    let opset = opset.unwrap_or(1);
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(model_error(
            path,
            format!(
                "the model imports opset {opset} of the default ONNX domain; opsets {MIN_OPSET} to {MAX_OPSET} are supported"
            ),
        )
        .hint(format!(
            "convert it: onnx.version_converter.convert_version(model, {})",
            if opset < MIN_OPSET { 13 } else { MAX_OPSET }
        )));
    }
    let mut imp = Importer::new(Builder::new(name));

    // Initializers are constants.
    let mut initialized = HashSet::new();
    for t in graph.initializer.iter_mut() {
        let c = ConstTensor::from_proto_owned(t).map_err(|m| {
            model_error(path, format!("initializer `{}`: {m}", t.name))
                .hint("re-export the model with float32 weights stored inside the .onnx file")
        })?;
        initialized.insert(t.name.clone());
        imp.env.insert(t.name.clone(), Val::Const(c.into()));
    }

    // Graph inputs: bound (options, weights, frozen) or parameters, with the dims the build fixes.
    // An initializer listed as an input (every one in IR 3) is a weight unless the options keep
    // it as an input.
    let runtime_inputs: Vec<&proto::ValueInfoProto> = graph
        .input
        .iter()
        .filter(|vi| !initialized.contains(&vi.name) || options.initializers_as_inputs)
        .collect();
    let names: Vec<String> = runtime_inputs.iter().map(|vi| vi.name.clone()).collect();
    let symbols = graph_inputs::symbols(runtime_inputs.iter().copied());
    if let Some(m) = options.inputs.unmatched(&names, &symbols) {
        return Err(model_error(path, m));
    }
    let mut used_names = HashSet::new();
    let mut api_types = crate::ir::ApiTypes::default();
    for (position, vi) in runtime_inputs.into_iter().enumerate() {
        let input_err = |m: String| model_error(path, format!("graph input `{}`: {m}", vi.name));
        if let Some(t) = options.constants.get(&vi.name) {
            let c = ConstTensor::from_proto(t).map_err(input_err)?;
            imp.env.insert(vi.name.clone(), Val::Const(c.into()));
            continue;
        }
        let Some(type_proto::Value::TensorType(tt)) =
            vi.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            return Err(input_err(
                "it is not a tensor (sequences, maps and optionals are not supported)".into(),
            ));
        };
        let dims =
            graph_inputs::input_dims(vi, position, &options.inputs).map_err(|(m, hint)| {
                let e = input_err(m);
                match hint {
                    Some(h) => e.hint(h),
                    None => e,
                }
            })?;
        if let Some(frozen) = options.inputs.frozen(&vi.name, position) {
            let c = graph_inputs::frozen_tensor(frozen, tt.elem_type, &dims).map_err(input_err)?;
            imp.env.insert(vi.name.clone(), Val::Const(c.into()));
            continue;
        }
        let api = graph_inputs::api_dtype(tt.elem_type);
        let dtype = match tensor::runtime_dtype(tt.elem_type) {
            Some(d)
                if api.is_some() || matches!(tt.elem_type, dt::FLOAT | dt::INT32 | dt::BOOL) =>
            {
                d
            }
            _ => {
                return Err(input_err(format!(
                    "its element type is {}; run-time inputs must be float32, float16, bfloat16, int64, int32, int16, int8, uint32, uint16, uint8 or bool",
                    dt::name(tt.elem_type)
                ))
                .hint(format!(
                    "export the input in one of those types, or freeze it to a constant: --freeze {}=VALUE",
                    vi.name
                )));
            }
        };
        let shape = Shape::new(dtype, dims);
        let clean = c_name::identifier(&vi.name);
        if let Some(lit) = bindings.take(&[vi.name.as_str(), clean.as_str()], &shape) {
            let lit: Literal = lit.map_err(|m| SpecError::new(path, SpecErrorKind::Weight(m)))?;
            let id = imp.b.constant(&clean, lit);
            imp.env.insert(
                vi.name.clone(),
                Val::Rt {
                    id,
                    ty: tt.elem_type,
                },
            );
            continue;
        }
        let pname = unique(&clean, &mut used_names);
        let id = imp
            .b
            .parameter(&pname, shape)
            .map_err(|m| input_err(m).hint("export the model with smaller fixed input shapes"))?;
        api_types.inputs.push(api);
        imp.env.insert(
            vi.name.clone(),
            Val::Rt {
                id,
                ty: tt.elem_type,
            },
        );
    }

    let given: HashSet<&str> = graph
        .input
        .iter()
        .map(|vi| vi.name.as_str())
        .chain(graph.initializer.iter().map(|t| t.name.as_str()))
        .collect();
    // QDQ groups onnxruntime runs as integer kernels lower as those kernels (`qdq.rs`).
    let konst = |name: &str| match imp.env.get(name) {
        Some(Val::Const(c)) => Some(c.as_f64()),
        _ => None,
    };
    let fused = qdq::fuse(graph, &konst, opset);
    lower_nodes(
        &mut imp,
        path,
        fused.as_deref().unwrap_or(&graph.node),
        opset,
        &given,
    )?;

    if graph.output.is_empty() {
        return Err(model_error(path, "the graph has no outputs".into()));
    }
    let mut out_names = HashSet::new();
    for vi in &graph.output {
        let Some(v) = imp.env.get(&vi.name).cloned() else {
            return Err(model_error(
                path,
                format!(
                    "graph output `{}` is produced by no node, initializer or input",
                    vi.name
                ),
            ));
        };
        let oname = unique(&c_name::identifier(&vi.name), &mut out_names);
        let id = imp
            .materialize_val(&v)
            .map_err(|m| model_error(path, format!("graph output `{}`: {m}", vi.name)))?;
        imp.b.output(&oname, id);
        // int64, uint8, float16, ... outputs return in their ONNX type through the C API.
        let elem = graph_inputs::elem_type(vi).unwrap_or(context::ty_of(&v));
        let api =
            graph_inputs::api_dtype(elem).filter(|&a| crate::ir::api::allowed(a, imp.b.dtype(id)));
        api_types.outputs.push(api);
    }
    let mut m = imp.b.finish();
    if !api_types.is_empty() {
        m.api = api_types;
    }
    Ok(m)
}

/// Lowers `nodes` in order into `imp`, binding each node's outputs in its environment (the main
/// graph, or a subgraph whose nodes may read any value of the graphs around it). `given` are the
/// graph's inputs and initializers: a node that writes one of them, or a name an earlier node
/// wrote, is an error naming both (ONNX graphs are single-assignment; onnxruntime rejects them
/// too), rather than letting the last writer silently win.
pub(super) fn lower_nodes(
    imp: &mut Importer,
    path: &Path,
    nodes: &[proto::NodeProto],
    opset: i64,
    given: &HashSet<&str>,
) -> Result<(), SpecError> {
    let mut writers: HashMap<&str, usize> = HashMap::new();
    for (index, node) in nodes.iter().enumerate() {
        let cx = Ctx {
            path,
            node,
            index,
            opset,
        };
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if given.contains(out.as_str()) {
                return Err(cx
                    .err(format!(
                        "it writes `{}`, which is a graph input or initializer",
                        crate::util::shorten::shorten(out)
                    ))
                    .hint("every value of an ONNX graph has exactly one producer; rename the node's output"));
            }
            if let Some(&first) = writers.get(out.as_str()) {
                let earlier = Ctx {
                    path,
                    node: &nodes[first],
                    index: first,
                    opset,
                };
                return Err(cx
                    .err(format!(
                        "it writes `{}`, which {} already writes",
                        crate::util::shorten::shorten(out),
                        earlier.describe()
                    ))
                    .hint("every value of an ONNX graph has exactly one producer; rename one of the two outputs"));
            }
            writers.insert(out.as_str(), index);
        }
        let outs = if node.domain.is_empty() || node.domain == "ai.onnx" {
            imp.lower_node(&cx)?
        } else if node.domain == contrib::MICROSOFT_DOMAIN {
            imp.lower_contrib(&cx)?
        } else {
            return Err(cx
                .err(format!(
                    "its domain `{}` is not supported (only the default ONNX domain and `{}` are)",
                    node.domain,
                    contrib::MICROSOFT_DOMAIN
                ))
                .hint("export without custom ops of other domains"));
        };
        for (j, out) in node.output.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            match outs.get(j) {
                Some(Some(v)) => {
                    imp.env.insert(out.clone(), v.clone());
                }
                _ => {
                    return Err(cx.err(format!(
                        "its output {j} (`{out}`) is not supported; only the first {} output(s) are",
                        outs.iter().filter(|o| o.is_some()).count()
                    )));
                }
            }
        }
    }
    Ok(())
}

fn unique(base: &str, used: &mut HashSet<String>) -> String {
    let mut name = base.to_string();
    let mut n = 1;
    while used.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    used.insert(name.clone());
    name
}
