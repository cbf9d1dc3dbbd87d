//! The fp32 ops of domain `com.microsoft` that onnxruntime's transformer optimiser and its graph
//! fusions write into saved models, rewritten as default-domain nodes.
//!
//! Contract: each contrib node becomes a short chain of default-domain nodes (named after the
//! contrib node, so errors still point at it) read in the signatures of opset
//! [`super::rewrite::CONTRIB_LOWERING_OPSET`], whatever the model's own opset; their values live under names no
//! ONNX graph uses (`<output>::contrib.<k>`). Semantics follow onnxruntime's CPU kernels
//! (`docs/ContribOperators.md`):
//! - `Gelu(X)` = X·Φ(X) (erf form); `BiasGelu(A, B)` = Gelu(A + B);
//!   `FastGelu(X, bias?)` = the tanh form of Gelu of X + bias; `QuickGelu(X)` = X·σ(alpha·X)
//!   (alpha default [`QUICK_GELU_ALPHA`]);
//! - `SkipLayerNormalization(input, skip, gamma, beta?, bias?)`: s = input + skip + bias,
//!   LayerNorm over the last axis (epsilon default [`SKIP_LAYER_NORM_EPSILON`]); outputs: the
//!   result, mean, inv_std_var, s; `SkipSimplifiedLayerNormalization(input, skip, gamma, bias?)`
//!   the same with RMS normalisation (outputs 0 and 3); `LayerNormalization` and
//!   `SimplifiedLayerNormalization` as the default-domain LayerNormalization/RMSNormalization;
//! - `FusedConv(X, W, B?, Z?)` = act(Conv(X, W, B) + Z) with `activation` Relu, Sigmoid, Tanh,
//!   LeakyRelu (alpha), Clip (min, max) or HardSigmoid (alpha, beta) from `activation_params`;
//! - `FusedGemm(A, B, C?)` = act(Gemm(A, B, C)) with `activation` one of
//!   [`FUSED_GEMM_ACTIVATIONS`], its parameters from `activation_alpha`/`_beta`/`_gamma`;
//!   `FusedMatMul(A, B)` = `alpha`·MatMul(A', B') with `transA`/`transB` swapping the last two
//!   dims (`transBatchA`/`transBatchB` are refused);
//! - `BiasAdd(X, bias, skip)` = X + bias + skip;
//! - `Attention`, `MultiHeadAttention` and `EmbedLayerNormalization`: `contrib_attention.rs`.
//!
//! Any other op of the domain is an error naming it.

use super::context::{Ctx, Importer, R};
use super::elementwise::Outs;
use super::proto::AttributeProto;
use super::rewrite::{Rewrite, attr_f, attr_i, attr_ints, attr_s, input_name};
use crate::util::suggest::nearest;

/// The contrib domain onnxruntime's fusions write.
pub const MICROSOFT_DOMAIN: &str = "com.microsoft";

/// QuickGelu's default `alpha` (onnxruntime's schema; 1.702 is the sigmoid approximation of Φ).
pub const QUICK_GELU_ALPHA: f32 = 1.702;

/// SkipLayerNormalization's default `epsilon` (onnxruntime's `kDefaultSkipLayerNormEpsilon`).
pub const SKIP_LAYER_NORM_EPSILON: f32 = 1e-12;

/// FusedGemm's activations: onnxruntime's element-wise functors that are also default-domain ops
/// we import (their `alpha`/`beta`/`gamma` come from `activation_alpha`/...).
const FUSED_GEMM_ACTIVATIONS: &[&str] = &[
    "Elu",
    "HardSigmoid",
    "LeakyRelu",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "Tanh",
    "ThresholdedRelu",
];

/// The `com.microsoft` ops we import.
pub const SUPPORTED_CONTRIB_OPS: &[&str] = &[
    "Attention",
    "BiasAdd",
    "BiasGelu",
    "EmbedLayerNormalization",
    "FastGelu",
    "FusedConv",
    "FusedGemm",
    "FusedMatMul",
    "Gelu",
    "LayerNormalization",
    "MultiHeadAttention",
    "QuickGelu",
    "SimplifiedLayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    // QOperator ops of onnxruntime's quantizer (`quant.rs`).
    "DequantizeLinear",
    "QGemm",
    "QLinearAdd",
    "QLinearAveragePool",
    "QLinearConcat",
    "QLinearGlobalAveragePool",
    "QLinearLeakyRelu",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearSoftmax",
    "QuantizeLinear",
];

impl Importer {
    /// Lowers a node of domain `com.microsoft`.
    pub fn lower_contrib(&mut self, cx: &Ctx) -> R<Outs> {
        let op = cx.node.op_type.as_str();
        let mut rw = Rewrite {
            node: cx.node,
            index: cx.index,
            next: 0,
        };
        let inp = |j: usize| input_name(cx, j);
        match op {
            "Gelu" => {
                cx.arity(1, 1)?;
                self.via(cx, &mut rw, "Gelu", &[inp(0)], 1, vec![])
            }
            "BiasGelu" => {
                cx.arity(2, 2)?;
                let s = self.via1(cx, &mut rw, "Add", &[inp(0), inp(1)], vec![])?;
                self.via(cx, &mut rw, "Gelu", &[s], 1, vec![])
            }
            "FastGelu" => {
                cx.arity(1, 2)?;
                let mut x = inp(0);
                if cx.has_input(1) {
                    x = self.via1(cx, &mut rw, "Add", &[x, inp(1)], vec![])?;
                }
                let tanh = vec![attr_s("approximate", "tanh")];
                self.via(cx, &mut rw, "Gelu", &[x], 1, tanh)
            }
            "QuickGelu" => {
                cx.arity(1, 1)?;
                let alpha = cx.attr_f_or("alpha", QUICK_GELU_ALPHA)?;
                let a = self.const_f32(&mut rw, alpha);
                let ax = self.via1(cx, &mut rw, "Mul", &[inp(0), a], vec![])?;
                let s = self.via1(cx, &mut rw, "Sigmoid", &[ax], vec![])?;
                self.via(cx, &mut rw, "Mul", &[inp(0), s], 1, vec![])
            }
            "BiasAdd" => {
                cx.arity(3, 3)?;
                let s = self.via1(cx, &mut rw, "Add", &[inp(0), inp(1)], vec![])?;
                self.via(cx, &mut rw, "Add", &[s, inp(2)], 1, vec![])
            }
            "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => {
                let rms = op == "SkipSimplifiedLayerNormalization";
                cx.arity(3, if rms { 4 } else { 5 })?;
                let mut s = self.via1(cx, &mut rw, "Add", &[inp(0), inp(1)], vec![])?;
                let bias = if rms { 3 } else { 4 };
                if cx.has_input(bias) {
                    s = self.via1(cx, &mut rw, "Add", &[s, inp(bias)], vec![])?;
                }
                let eps = cx.attr_f_or("epsilon", SKIP_LAYER_NORM_EPSILON)?;
                let attrs = vec![attr_i("axis", -1), attr_f("epsilon", eps)];
                let mut outs = if rms {
                    let o = self.via(
                        cx,
                        &mut rw,
                        "RMSNormalization",
                        &[s.clone(), inp(2)],
                        1,
                        attrs,
                    )?;
                    vec![o[0].clone(), None, None]
                } else {
                    let mut ins = vec![s.clone(), inp(2)];
                    if cx.has_input(3) {
                        ins.push(inp(3));
                    }
                    self.via(cx, &mut rw, "LayerNormalization", &ins, 3, attrs)?
                };
                outs.push(self.env.get(&s).cloned());
                Ok(outs)
            }
            "LayerNormalization" | "SimplifiedLayerNormalization" => {
                let to = if op == "LayerNormalization" {
                    "LayerNormalization"
                } else {
                    "RMSNormalization"
                };
                let ins: Vec<String> = cx.node.input.clone();
                let attrs = cx.node.attribute.clone();
                let n = if to == "LayerNormalization" { 3 } else { 1 };
                self.via(cx, &mut rw, to, &ins, n, attrs)
            }
            "FusedConv" => self.fused_conv(cx, &mut rw),
            "QuantizeLinear"
            | "DequantizeLinear"
            | "QLinearAdd"
            | "QLinearMul"
            | "QLinearConcat"
            | "QLinearGlobalAveragePool"
            | "QLinearAveragePool"
            | "QLinearSoftmax"
            | "QLinearSigmoid"
            | "QLinearLeakyRelu"
            | "QGemm" => self.qcontrib(cx, &mut rw),
            "Attention" => self.ms_attention(cx, &mut rw),
            "MultiHeadAttention" => self.ms_multi_head_attention(cx, &mut rw),
            "EmbedLayerNormalization" => self.embed_layer_norm(cx, &mut rw),
            "FusedGemm" => {
                cx.arity(2, 3)?;
                let act = cx.attr_s("activation")?.unwrap_or_default();
                if !act.is_empty() && !FUSED_GEMM_ACTIVATIONS.contains(&act.as_str()) {
                    return Err(cx.attr_err(
                        "activation",
                        format!(
                            "`{act}` is not supported ({} are)",
                            FUSED_GEMM_ACTIVATIONS.join(", ")
                        ),
                    ));
                }
                let (gemm_attrs, act_attrs): (Vec<_>, Vec<_>) = cx
                    .node
                    .attribute
                    .iter()
                    .filter(|a| a.name != "activation")
                    .cloned()
                    .partition(|a| !a.name.starts_with("activation_"));
                let y = self.via1(cx, &mut rw, "Gemm", &cx.node.input, gemm_attrs)?;
                if act.is_empty() {
                    return Ok(vec![self.env.get(&y).cloned()]);
                }
                // `activation_alpha` → the activation's `alpha`, and so on (onnxruntime's rule).
                let act_attrs = act_attrs
                    .into_iter()
                    .map(|mut a| {
                        a.name = a.name["activation_".len()..].to_string();
                        a
                    })
                    .collect();
                self.via(cx, &mut rw, &act, &[y], 1, act_attrs)
            }
            "FusedMatMul" => {
                cx.arity(2, 2)?;
                if cx.attr_i_or("transBatchA", 0)? != 0 || cx.attr_i_or("transBatchB", 0)? != 0 {
                    return Err(cx.err("transBatchA/transBatchB = 1 is not supported"));
                }
                let mut ins = Vec::new();
                for (j, flag) in ["transA", "transB"].into_iter().enumerate() {
                    let rank = self.in_dims(cx, j)?.len();
                    if cx.attr_i_or(flag, 0)? != 0 && rank >= 2 {
                        let mut perm: Vec<i64> = (0..rank as i64).collect();
                        perm.swap(rank - 2, rank - 1);
                        let t = self.via1(
                            cx,
                            &mut rw,
                            "Transpose",
                            &[inp(j)],
                            vec![attr_ints("perm", perm)],
                        )?;
                        ins.push(t);
                    } else {
                        ins.push(inp(j));
                    }
                }
                let alpha = cx.attr_f_or("alpha", 1.0)?;
                if alpha == 1.0 {
                    return self.via(cx, &mut rw, "MatMul", &ins, 1, vec![]);
                }
                let y = self.via1(cx, &mut rw, "MatMul", &ins, vec![])?;
                let a = self.const_f32(&mut rw, alpha);
                self.via(cx, &mut rw, "Mul", &[y, a], 1, vec![])
            }
            other => {
                let hint = nearest(other, SUPPORTED_CONTRIB_OPS.iter().copied())
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default();
                Err(cx
                    .err(format!("op `{other}` of domain `{MICROSOFT_DOMAIN}` is not supported"))
                    .hint(format!(
                        "{hint}the supported contrib ops are listed in docs/import.md; save the model before onnxruntime's fusions (graph_optimization_level ORT_ENABLE_BASIC or lower) to keep default-domain ops"
                    )))
            }
        }
    }

    fn fused_conv(&mut self, cx: &Ctx, rw: &mut Rewrite) -> R<Outs> {
        cx.arity(2, 4)?;
        let act = cx.attr_s("activation")?.unwrap_or_default();
        let params = cx.attr_floats("activation_params")?.unwrap_or_default();
        let want = match act.as_str() {
            "" | "Relu" | "Sigmoid" | "Tanh" => 0,
            "LeakyRelu" => 1,
            "Clip" | "HardSigmoid" => 2,
            other => {
                return Err(cx.attr_err(
                    "activation",
                    format!(
                        "`{other}` is not supported (Relu, Sigmoid, Tanh, LeakyRelu, Clip and HardSigmoid are)"
                    ),
                ));
            }
        };
        if params.len() < want {
            return Err(cx.attr_err(
                "activation_params",
                format!("`{act}` needs {want} parameter(s), found {}", params.len()),
            ));
        }
        let conv_attrs: Vec<AttributeProto> = cx
            .node
            .attribute
            .iter()
            .filter(|a| a.name != "activation" && a.name != "activation_params")
            .cloned()
            .collect();
        let inp = |j: usize| input_name(cx, j);
        let mut ins = vec![inp(0), inp(1)];
        if cx.has_input(2) {
            ins.push(inp(2));
        }
        let mut y = self.via1(cx, rw, "Conv", &ins, conv_attrs)?;
        if cx.has_input(3) {
            y = self.via1(cx, rw, "Add", &[y, inp(3)], vec![])?;
        }
        let (op, ins, attrs) = match act.as_str() {
            "" => return Ok(vec![self.env.get(&y).cloned()]),
            "LeakyRelu" => ("LeakyRelu", vec![y], vec![attr_f("alpha", params[0])]),
            "HardSigmoid" => (
                "HardSigmoid",
                vec![y],
                vec![attr_f("alpha", params[0]), attr_f("beta", params[1])],
            ),
            "Clip" => {
                let lo = self.const_f32(rw, params[0]);
                let hi = self.const_f32(rw, params[1]);
                ("Clip", vec![y, lo, hi], vec![])
            }
            other => (other, vec![y], vec![]),
        };
        let op = op.to_string();
        self.via(cx, rw, &op, &ins, 1, attrs)
    }
}
