//! The lowering's state: the IR value of each TFLite tensor, held in a layout of the importer's
//! choosing, and the helpers every op's lowering uses.
//!
//! Contract: TFLite tensors are NHWC; the IR's convolutions and window reductions are NCHW
//! (`ir::inst`, `bf01`). Each tensor's value is a [`Val`]: an IR instruction and a permutation
//! `perm` saying which TFLite dim each IR dim holds (IR dim `i` = TFLite dim `perm[i]`). A
//! convolution's or pool's result stays NCHW (`perm = [0, 3, 1, 2]`) for whatever reads it
//! next: elementwise ops keep their operand's layout (other operands, constants included, are
//! brought to it: transposes of constants fold at compile time), concatenations and reductions
//! map their axes through `perm`, and everything else reads the TFLite order
//! ([`Importer::tflite`], a transpose only where the layout differs). Model outputs are in TFLite
//! order. So a chain conv → add → relu → conv has no transpose, and every value means exactly
//! what the TFLite tensor means, element by element.
//!
//! The integers of a quantized int8/uint8 tensor are held as integer-valued f32 between
//! operators ([`Importer::set`]): the int8 convolution kernels and their register epilogues
//! (`codegen/cpu/epilogue.rs`, requantization included) and one-byte activation storage
//! (`codegen/cpu/byte_storage.rs`) work on such values. [`Importer::val`] gives the integer
//! lowerings (`int8.rs`) the i32 they compute in; [`Importer::val_f32`] gives the products their
//! f32 operand; `passes/exact_integers.rs` removes the conversions between the two.
//!
//! Errors name the operator (`operator #3 (CONV_2D)`) and, where one is at fault, the tensor.

use super::read::{Graph, Operator, Tensor, model_error};
use crate::front::decompose::Emitter;
use crate::front::diag::SpecError;
use crate::ir::{BinaryOp, Builder, DType, InstId, Literal, Op};
use crate::limits::IMPORT_FOLD_MAX_ELEMENTS;
use std::path::Path;
use xla_aot_tflite_schema::tflite::{self, TensorType};

/// Result of a lowering step.
pub type R<T> = Result<T, SpecError>;

/// NCHW as a permutation of NHWC dims: IR dim `i` holds TFLite dim `NCHW[i]`.
pub const NCHW: [usize; 4] = [0, 3, 1, 2];

/// A tensor's IR value and the layout it is held in.
#[derive(Debug, Clone)]
pub struct Val {
    pub id: InstId,
    /// IR dim `i` holds TFLite dim `perm[i]`; the identity for TFLite order.
    pub perm: Vec<usize>,
}

impl Val {
    /// A value in TFLite order.
    pub fn plain(id: InstId, rank: usize) -> Val {
        Val {
            id,
            perm: (0..rank).collect(),
        }
    }

    /// Whether the value is held in TFLite order.
    pub fn is_plain(&self) -> bool {
        self.perm.iter().enumerate().all(|(i, &p)| i == p)
    }
}

/// The importer of one graph.
pub struct Importer<'g, 'a> {
    pub path: &'g Path,
    pub g: &'g Graph<'a>,
    pub b: Builder,
    /// The value of each tensor once computed (constants on first use).
    vals: Vec<Option<Val>>,
    /// The operator being lowered (for names and errors).
    op: Option<&'g Operator<'a>>,
}

impl<'g, 'a> Importer<'g, 'a> {
    pub fn new(path: &'g Path, g: &'g Graph<'a>, name: &str) -> Importer<'g, 'a> {
        Importer {
            path,
            g,
            b: Builder::new(name),
            vals: vec![None; g.tensors.len()],
            op: None,
        }
    }

    /// Starts lowering `op`.
    pub fn enter(&mut self, op: &'g Operator<'a>) {
        self.op = Some(op);
    }

    /// The operator being lowered.
    pub fn op(&self) -> &'g Operator<'a> {
        self.op.expect("an operator is being lowered")
    }

    /// An error at the current operator.
    pub fn err(&self, message: impl Into<String>) -> SpecError {
        let e = model_error(self.path, message.into());
        match self.op {
            Some(op) => e.in_node(op.describe()),
            None => e,
        }
    }

    /// A builder message as an error at the current operator.
    pub fn ir(&self) -> impl Fn(String) -> SpecError + '_ {
        move |m| self.err(format!("the operands do not fit the op: {m}"))
    }

    /// The name of an instruction the current operator makes, playing `part`.
    pub fn name(&self, part: &str) -> String {
        let base = match self.op {
            Some(op) => format!("op{}.{}", op.index, op.name.to_ascii_lowercase()),
            None => "input".into(),
        };
        if part.is_empty() {
            base
        } else {
            format!("{base}.{part}")
        }
    }

    /// `describe` of tensor `t`: `tensor 4 `conv/weights``.
    pub fn tensor_name(&self, t: usize) -> String {
        format!("tensor {t} `{}`", self.g.tensors[t].name)
    }

    /// Records the value of tensor `t`. An integer of a quantized int8/uint8 tensor is held as
    /// an integer-valued f32 (module doc).
    pub fn set(&mut self, t: usize, v: Val) {
        let v = if self.held_in_f32(t) && self.b.dtype(v.id) == DType::I32 {
            let name = self.name("held");
            let id = self
                .b
                .add(&name, Op::Convert { to: DType::F32 }, &[v.id])
                .expect("a convert of an i32 value");
            Val { id, perm: v.perm }
        } else {
            v
        };
        self.vals[t] = Some(v);
    }

    /// Whether tensor `t`'s integers are held in f32 between operators: a quantized int8 or
    /// uint8 tensor.
    fn held_in_f32(&self, t: usize) -> bool {
        let tensor = self.tensor(t);
        matches!(tensor.dtype, TensorType::Int8 | TensorType::Uint8) && tensor.quant.is_some()
    }

    /// Quantized tensor `t` as the integer-valued f32 it is held in, when an operator wrote it
    /// so (a model output passed as a byte from f32: `ir/api_types.rs` `output_bytes`).
    pub fn held_f32(&self, t: usize) -> Option<Val> {
        let v = self.vals[t].clone()?;
        (self.held_in_f32(t) && self.b.dtype(v.id) == DType::F32).then_some(v)
    }

    /// The integers of quantized tensor `t` as the integer-valued f32 they are held in (an
    /// integer kernel's operand), in whatever layout they are held.
    pub fn val_f32(&mut self, t: usize) -> R<Val> {
        let v = self.val(t)?;
        if self.b.dtype(v.id) == DType::F32 {
            return Ok(v);
        }
        let name = self.name("as_f32");
        let id = self
            .b
            .add(&name, Op::Convert { to: DType::F32 }, &[v.id])
            .map_err(self.ir())?;
        Ok(Val { id, perm: v.perm })
    }

    /// Records instruction `id`, held NCHW, as the value of tensor `t` (a convolution's or
    /// pool's result).
    pub fn set_nchw(&mut self, t: usize, id: InstId) {
        self.set(
            t,
            Val {
                id,
                perm: NCHW.to_vec(),
            },
        );
    }

    /// The value of tensor `t` if it has one yet.
    pub fn val_of(&self, t: usize) -> Option<&Val> {
        self.vals.get(t).and_then(Option::as_ref)
    }

    /// Input `j` of the current operator as a tensor index, `None` when absent (−1 or past the
    /// list).
    pub fn input_index(&self, j: usize) -> Option<usize> {
        self.op()
            .inputs
            .get(j)
            .and_then(|&i| usize::try_from(i).ok())
    }

    /// Input `j`, which must be present.
    pub fn need(&self, j: usize) -> R<usize> {
        self.input_index(j)
            .ok_or_else(|| self.err(format!("input {j} is absent; {} takes it", self.op().name)))
    }

    /// Output `j`'s tensor index.
    pub fn output_index(&self, j: usize) -> R<usize> {
        self.op()
            .outputs
            .get(j)
            .map(|&i| i as usize)
            .ok_or_else(|| self.err(format!("output {j} is absent")))
    }

    /// The tensor `t`.
    pub fn tensor(&self, t: usize) -> &'g Tensor<'a> {
        &self.g.tensors[t]
    }

    /// The value of tensor `t` in whatever layout it is held (a constant is made on first use).
    pub fn val(&mut self, t: usize) -> R<Val> {
        if let Some(v) = &self.vals[t] {
            let v = v.clone();
            if self.held_in_f32(t) && self.b.dtype(v.id) == DType::F32 {
                // The i32 the integer lowerings take; `passes/exact_integers.rs` removes the
                // round trip where the next op holds f32 again.
                let name = self.name("int");
                let id = self
                    .b
                    .add(&name, Op::Convert { to: DType::I32 }, &[v.id])
                    .map_err(self.ir())?;
                return Ok(Val { id, perm: v.perm });
            }
            return Ok(v);
        }
        let tensor = self.tensor(t);
        if tensor.data.is_none() {
            return Err(self
                .err(format!(
                    "{} is read before any operator writes it and is not a constant",
                    self.tensor_name(t)
                ))
                .hint(
                    "the operators must be in execution order, as TFLite's converter writes them",
                ));
        }
        let lit = self.literal(t)?;
        let rank = lit.dims.len();
        let id = self.b.constant(&constant_name(t, &tensor.name), lit);
        let v = Val::plain(id, rank);
        self.vals[t] = Some(v.clone());
        Ok(v)
    }

    /// Tensor `t` in TFLite order.
    pub fn tflite(&mut self, t: usize) -> R<InstId> {
        let v = self.val(t)?;
        self.plain(&v)
    }

    /// `v` in TFLite order.
    pub fn plain(&mut self, v: &Val) -> R<InstId> {
        self.permuted(v, &(0..v.perm.len()).collect::<Vec<_>>())
    }

    /// `v` held in layout `perm` (a permutation of its TFLite dims).
    pub fn permuted(&mut self, v: &Val, perm: &[usize]) -> R<InstId> {
        if v.perm == perm {
            return Ok(v.id);
        }
        // IR dim i of the result holds TFLite dim perm[i], which v holds at IR dim
        // position_of(perm[i]).
        let permutation: Vec<usize> = perm
            .iter()
            .map(|p| v.perm.iter().position(|q| q == p).unwrap_or(0))
            .collect();
        let name = self.name("layout");
        self.b
            .add(&name, Op::Transpose { permutation }, &[v.id])
            .map_err(self.ir())
    }

    /// `x[starts:limits]` with unit strides.
    pub fn unit_slice(
        &mut self,
        part: &str,
        x: InstId,
        starts: Vec<usize>,
        limits: Vec<usize>,
    ) -> R<InstId> {
        let strides = vec![1; starts.len()];
        self.slice_with_strides(part, x, starts, limits, strides)
    }

    /// `x[starts:limits:strides]`.
    pub fn slice_with_strides(
        &mut self,
        part: &str,
        x: InstId,
        starts: Vec<usize>,
        limits: Vec<usize>,
        strides: Vec<usize>,
    ) -> R<InstId> {
        let name = self.name(part);
        self.b
            .add(
                &name,
                Op::Slice {
                    starts,
                    limits,
                    strides,
                },
                &[x],
            )
            .map_err(self.ir())
    }

    /// The TFLite dims of `v`.
    pub fn dims(&self, v: &Val) -> Vec<usize> {
        let ir = &self.b.shape(v.id).dims;
        let mut out = vec![0; ir.len()];
        for (i, &p) in v.perm.iter().enumerate() {
            out[p] = ir[i];
        }
        out
    }

    /// The constant tensor `t` as a literal (f32 for float and quantized types, i32 for
    /// integers, pred for bool), in TFLite order.
    pub fn literal(&self, t: usize) -> R<Literal> {
        let tensor = self.tensor(t);
        let Some(data) = tensor.data else {
            return Err(self.err(format!(
                "{} must be a constant here (weights, filters and padding values are)",
                self.tensor_name(t)
            )));
        };
        let dims = tensor.shape.clone();
        let lit = match tensor.dtype {
            TensorType::Float32 => Literal::from_f32(dims, &f32s(data)),
            TensorType::Float16 => Literal::from_f32(
                dims,
                &data
                    .chunks_exact(2)
                    .map(|c| crate::ir::half::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                    .collect::<Vec<_>>(),
            ),
            TensorType::Int32 => Literal::from_i32(dims, &i32s(data)),
            TensorType::Int8 | TensorType::Uint8 | TensorType::Int16 => {
                Literal::from_i32(dims, &self.int_data(t)?)
            }
            TensorType::Int64 => {
                let v: Vec<i64> = data
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                if v.iter().any(|&x| i32::try_from(x).is_err()) {
                    return Err(self.err(format!(
                        "{} holds int64 values outside int32's range; the compiler computes integers in int32",
                        self.tensor_name(t)
                    )));
                }
                Literal::from_i32(dims, &v.iter().map(|&x| x as i32).collect::<Vec<_>>())
            }
            TensorType::Bool => {
                Literal::from_pred(dims, &data.iter().map(|&b| b != 0).collect::<Vec<_>>())
            }
            other => {
                return Err(self.err(format!(
                    "{} is a constant of type {other:?}, which this importer does not read as a float model's weight",
                    self.tensor_name(t)
                )));
            }
        };
        Ok(lit)
    }

    /// DEQUANTIZE of a constant: float16 weights widened, int8/uint8/int16 weights
    /// `scale · (q − zero_point)` per tensor or per channel along `quantized_dimension`.
    pub fn dequantize_constant(&mut self) -> R<()> {
        let xt = self.need(0)?;
        let tensor = self.tensor(xt);
        if tensor.data.is_none() {
            return Err(self
                .err(format!(
                    "{} is computed at run time; DEQUANTIZE is taken of constants only (float models with float16 or int8 weights)",
                    self.tensor_name(xt)
                ))
                .hint("integer TFLite models are not imported yet (issue 43); convert the model to float32 or float16 weights"));
        }
        let lit = match tensor.dtype {
            TensorType::Float16 | TensorType::Float32 => self.literal(xt)?,
            TensorType::Int8 | TensorType::Uint8 | TensorType::Int16 => {
                let data = tensor.data.unwrap_or(&[]);
                let q: Vec<f64> = match tensor.dtype {
                    TensorType::Int8 => data.iter().map(|&b| f64::from(b as i8)).collect(),
                    TensorType::Uint8 => data.iter().map(|&b| f64::from(b)).collect(),
                    _ => data
                        .chunks_exact(2)
                        .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
                        .collect(),
                };
                let Some(quant) = &tensor.quant else {
                    return Err(self.err(format!(
                        "{} has no quantization parameters to dequantize with",
                        self.tensor_name(xt)
                    )));
                };
                let dims = &tensor.shape;
                let channels = quant.scale.len();
                // Elements between two steps of the quantized dimension, and its extent.
                let (inner, extent) = if channels > 1 {
                    let d = quant.dimension;
                    if d >= dims.len() || dims[d] != channels {
                        return Err(self.err(format!(
                            "{} has {channels} scales along dim {d} of {dims:?}",
                            self.tensor_name(xt)
                        )));
                    }
                    (dims[d + 1..].iter().product::<usize>(), channels)
                } else {
                    (1, 1)
                };
                let values: Vec<f32> = q
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let c = (i / inner.max(1)) % extent;
                        let zp = quant.zero_point.get(c).copied().unwrap_or(0) as f64;
                        ((v - zp) * f64::from(quant.scale[c])) as f32
                    })
                    .collect();
                Literal::from_f32(dims.clone(), &values)
            }
            other => {
                return Err(self.err(format!(
                    "DEQUANTIZE of {other:?} ({}) is not supported",
                    self.tensor_name(xt)
                )));
            }
        };
        let rank = lit.dims.len();
        let id = self.b.constant(&self.name(""), lit);
        let o = self.output_index(0)?;
        self.set(o, Val::plain(id, rank));
        Ok(())
    }

    /// The constant integer tensor `t` (int32 or int64) as a list: shapes, axes, paddings.
    pub fn const_ints(&self, t: usize) -> R<Vec<i64>> {
        let tensor = self.tensor(t);
        let Some(data) = tensor.data else {
            return Err(self.err(format!(
                "{} must be a constant (shapes, axes and paddings are fixed at compile time)",
                self.tensor_name(t)
            )));
        };
        Ok(match tensor.dtype {
            TensorType::Int32 => i32s(data).into_iter().map(i64::from).collect(),
            TensorType::Int64 => data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            other => {
                return Err(self.err(format!(
                    "{} is {other:?}; an int32 or int64 constant was expected",
                    self.tensor_name(t)
                )));
            }
        })
    }

    /// Refuses a constant of `n` elements the importer would build itself (interpolation
    /// matrices, window counts) past [`IMPORT_FOLD_MAX_ELEMENTS`]: such a shape comes from a
    /// damaged or hostile file, never from a model that fits a device.
    pub fn check_built(&self, n: Option<usize>, what: &str) -> R<()> {
        match n {
            Some(n) if n <= IMPORT_FOLD_MAX_ELEMENTS => Ok(()),
            _ => Err(self.err(format!(
                "{what} would hold more than {IMPORT_FOLD_MAX_ELEMENTS} elements (IMPORT_FOLD_MAX_ELEMENTS, docs/limits.md)"
            ))),
        }
    }

    /// An axis `a` (negative counts from the end) of a rank-`rank` tensor.
    pub fn axis(&self, a: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        let b = if a < 0 { a + r } else { a };
        if (0..r).contains(&b) {
            Ok(b as usize)
        } else {
            Err(self.err(format!("axis {a} is out of range for rank {rank}")))
        }
    }

    /// Applies a fused activation (`fused_activation_function`) to `x`.
    pub fn activation(&mut self, x: InstId, f: tflite::ActivationFunctionType) -> R<InstId> {
        use tflite::ActivationFunctionType as A;
        match f {
            A::None => Ok(x),
            A::Relu => self.maximum_with(x, 0.0),
            A::Relu6 => self.clamp(x, 0.0, 6.0),
            A::ReluN1To1 => self.clamp(x, -1.0, 1.0),
            A::Tanh => {
                let name = self.name("tanh");
                self.b
                    .add(&name, Op::Unary(crate::ir::UnaryOp::Tanh), &[x])
                    .map_err(self.ir())
            }
            A::SignBit => Err(self.err("the fused activation SIGN_BIT is not supported")),
        }
    }

    /// `max(x, v)` elementwise.
    pub fn maximum_with(&mut self, x: InstId, v: f32) -> R<InstId> {
        let z = self.splat(v, x)?;
        let name = self.name("relu");
        self.b
            .add(&name, Op::Binary(BinaryOp::Maximum), &[x, z])
            .map_err(self.ir())
    }

    /// `min(max(x, lo), hi)` elementwise.
    pub fn clamp(&mut self, x: InstId, lo: f32, hi: f32) -> R<InstId> {
        let l = self.b.scalar(&self.name("lo"), lo);
        let h = self.b.scalar(&self.name("hi"), hi);
        let name = self.name("clamp");
        self.b.add(&name, Op::Clamp, &[l, x, h]).map_err(self.ir())
    }

    /// A scalar broadcast to the shape of `like`.
    pub fn splat(&mut self, v: f32, like: InstId) -> R<InstId> {
        let dims = self.b.shape(like).dims.clone();
        let s = self.b.scalar(&self.name("c"), v);
        if dims.is_empty() {
            return Ok(s);
        }
        let name = self.name("c");
        self.b
            .broadcast(&name, s, Vec::new(), dims)
            .map_err(self.ir())
    }

    /// `op(a, b)` of two same-shape values.
    pub fn binary(&mut self, part: &str, op: BinaryOp, a: InstId, b: InstId) -> R<InstId> {
        let name = self.name(part);
        self.b
            .add(&name, Op::Binary(op), &[a, b])
            .map_err(self.ir())
    }

    /// The element type a float model's tensor of type `t` computes in.
    pub fn check_float(&self, t: usize) -> R<()> {
        let tensor = self.tensor(t);
        match tensor.dtype {
            TensorType::Float32 => Ok(()),
            TensorType::Float16 if tensor.data.is_some() => Ok(()),
            TensorType::Int8 | TensorType::Uint8 | TensorType::Int16
                if tensor.quant.is_some() && tensor.data.is_some() =>
            {
                Err(self
                    .err(format!(
                        "{} holds int8 weights of a float operator: a hybrid (dynamic-range) model, which quantizes activations at run time; not supported yet",
                        self.tensor_name(t)
                    ))
                    .hint("convert with full-integer quantization (a representative dataset) or without weight quantization"))
            }
            TensorType::Int8 | TensorType::Uint8 | TensorType::Int16 if tensor.quant.is_some() => {
                Err(self.integer_not_yet())
            }
            other => Err(self.err(format!(
                "{} is {other:?}; this op takes float32",
                self.tensor_name(t)
            ))),
        }
    }

    /// Finishes: the builder's module.
    pub fn finish(self) -> crate::ir::Module {
        self.b.finish()
    }

    /// The IR dtype of an instruction.
    pub fn dtype(&self, id: InstId) -> DType {
        self.b.dtype(id)
    }
}

impl Emitter for Importer<'_, '_> {
    type Error = SpecError;
    fn builder(&mut self) -> &mut Builder {
        &mut self.b
    }
    fn name(&self, part: &str) -> String {
        Importer::name(self, part)
    }
    fn shape_error(&self, message: String) -> SpecError {
        self.err(format!("the operands do not fit the op: {message}"))
    }
}

/// A constant's instruction name: its tensor name's last path component, or `tN`.
fn constant_name(t: usize, name: &str) -> String {
    let last = name
        .rsplit([';', '/'])
        .find(|s| !s.is_empty())
        .unwrap_or("");
    let clean: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if clean.is_empty() {
        format!("t{t}")
    } else {
        format!("t{t}.{clean}")
    }
}

/// Little-endian f32s.
pub fn f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Little-endian i32s.
pub fn i32s(data: &[u8]) -> Vec<i32> {
    data.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
