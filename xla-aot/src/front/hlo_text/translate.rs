//! XLA HLO instructions → xla-aot HLO: the opcode-by-opcode translation of a parsed module.
//!
//! Contract: [`translate`] turns the ENTRY computation of a [`RawModule`] into a module built with
//! [`Builder`] (so every result shape is inferred and then checked against the shape XLA printed),
//! inlining `call` and `fusion`, recognising the called computations of `reduce` and
//! `reduce-window` (a single add, maximum or minimum), and the variadic reduce JAX emits for
//! `argmax`/`argmin`. Integer and boolean arithmetic (index computations) is evaluated at import
//! time when its operands are constants; on run-time values it is an error, because xla-aot
//! computes in f32 (with i32 indices and pred masks). Every error names the line and column of the
//! instruction and, where it helps, how to export the model differently.

use super::syntax::{RawAttr, RawComputation, RawInst, RawModule, RawShape, split_top};
use crate::front::weights::Bindings;
use crate::ir::shape::dims_str;
use crate::ir::{
    BinaryOp, Builder, CompareDir, Computation, DType, DotDims, InstId, Instruction, Literal,
    Module, Op, Output, ReduceKind, Shape, UnaryOp, Window,
};
use std::collections::{HashMap, HashSet};

/// An error at a position of the HLO text.
#[derive(Debug, Clone)]
pub struct TranslateError {
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

type TResult<T> = Result<T, TranslateError>;

/// Attributes that carry no semantics for inference on one device; accepted on every opcode.
const IGNORED_ATTRS: &[&str] = &[
    "metadata",
    "frontend_attributes",
    "sharding",
    "backend_config",
    "operand_precision",
    "precision_config",
    "algorithm",
    "statistics_viz",
    "origin",
    "result_accuracy",
    "control-predecessors",
    "schedule",
];

/// Largest value evaluated at import time (iota, integer index math): index tensors are small;
/// anything bigger is a run-time value (or a hostile file asking for gigabytes).
const MAX_FOLD_ELEMENTS: usize = 1 << 20;

/// Most instructions one import-time evaluation may involve (index arithmetic is a handful).
const MAX_FOLD_INSTRUCTIONS: usize = 256;

/// Most instructions one import may build: inlined calls multiply, and a chain of computations
/// each calling the next twice would otherwise expand exponentially.
const MAX_INSTRUCTIONS: usize = 1 << 20;

/// Deepest nesting of `call`s: deeper is either recursion (which HLO forbids) or a corrupt file.
const MAX_CALL_DEPTH: usize = 64;

/// Opcodes the translator handles, for the error on any other.
const SUPPORTED: &[&str] = &[
    "parameter",
    "constant",
    "iota",
    "tuple",
    "get-tuple-element",
    "call",
    "fusion",
    "convert",
    "copy",
    "broadcast",
    "reshape",
    "bitcast",
    "transpose",
    "slice",
    "dynamic-slice",
    "concatenate",
    "pad",
    "select",
    "compare",
    "clamp",
    "and",
    "or",
    "not",
    "xor",
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "power",
    "negate",
    "abs",
    "exponential",
    "exponential-minus-one",
    "log",
    "log-plus-one",
    "sqrt",
    "rsqrt",
    "tanh",
    "logistic",
    "erf",
    "dot",
    "convolution",
    "reduce",
    "reduce-window",
];

/// A translated value.
#[derive(Debug, Clone)]
enum Val {
    T(InstId),
    Tuple(Vec<Val>),
}

impl Val {
    /// Tuple nesting depth (0 for an array).
    fn depth(&self) -> usize {
        match self {
            Val::T(_) => 0,
            Val::Tuple(v) => 1 + v.iter().map(Val::depth).max().unwrap_or(0),
        }
    }
}

struct Tr<'m, 'b, 'w> {
    m: &'m RawModule,
    b: Builder,
    bindings: &'b mut Bindings<'w>,
    depth: usize,
    /// Instructions translated so far (see [`MAX_INSTRUCTIONS`]).
    count: usize,
}

fn err_at<T>(line: usize, column: usize, message: impl Into<String>) -> TResult<T> {
    Err(TranslateError {
        line,
        column,
        message: message.into(),
        hint: None,
    })
}

fn err<T>(inst: &RawInst, message: impl Into<String>) -> TResult<T> {
    err_at(inst.line, inst.opcode_column, message)
}

fn with_hint<T>(r: TResult<T>, hint: &str) -> TResult<T> {
    r.map_err(|mut e| {
        e.hint = Some(hint.to_string());
        e
    })
}

/// XLA's element type names.
fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "f32" => DType::F32,
        "s32" => DType::I32,
        "pred" => DType::Pred,
        _ => return None,
    })
}

fn array_shape(inst: &RawInst, s: &RawShape) -> TResult<Shape> {
    match s {
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
fn int_list(inst: &RawInst, a: &RawAttr) -> TResult<Vec<i64>> {
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

fn usize_list(inst: &RawInst, a: &RawAttr) -> TResult<Vec<usize>> {
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

fn stripped_param_name(name: &str) -> &str {
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
fn input_name(name: &str) -> String {
    let s = crate::util::c_name::model_name(stripped_param_name(name));
    let t = s.trim_end_matches('_');
    if t.is_empty() { s } else { t.to_string() }
}

/// Parses the literal text of `constant(...)` for `shape`.
fn parse_literal(inst: &RawInst, shape: &Shape) -> TResult<Literal> {
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
fn literal_from_f64(dtype: DType, dims: Vec<usize>, v: &[f64]) -> Literal {
    match dtype {
        DType::F32 => Literal::from_f32(dims, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        DType::I32 => Literal::from_i32(dims, &v.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        _ => Literal::from_pred(dims, &v.iter().map(|&x| x != 0.0).collect::<Vec<_>>()),
    }
}

fn literal_values(l: &Literal) -> Vec<f64> {
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
fn parse_window(inst: &RawInst, a: &RawAttr, rank: usize) -> TResult<Window> {
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

impl<'m, 'b, 'w> Tr<'m, 'b, 'w> {
    fn shape(&self, id: InstId) -> &Shape {
        self.b.shape(id)
    }

    /// The value of `id` when it is computed from constants only (evaluated by the interpreter).
    fn const_value(&self, id: InstId) -> Option<Literal> {
        if let Op::Constant(l) = &self.b.inst(id).op {
            return Some(l.clone());
        }
        if self.shape(id).element_count() > MAX_FOLD_ELEMENTS {
            return None;
        }
        // The transitive operands, in order; any parameter makes it a run-time value.
        let mut need = HashSet::new();
        let mut stack = vec![id];
        while let Some(i) = stack.pop() {
            if need.insert(i) {
                let inst = self.b.inst(i);
                // Run-time values, large intermediates and long chains are not folded here.
                if matches!(inst.op, Op::Parameter { .. })
                    || inst.shape.element_count() > MAX_FOLD_ELEMENTS
                    || need.len() > MAX_FOLD_INSTRUCTIONS
                {
                    return None;
                }
                stack.extend(inst.operands.iter().copied());
            }
        }
        let mut order: Vec<InstId> = need.into_iter().collect();
        order.sort();
        let remap: HashMap<InstId, InstId> = order
            .iter()
            .enumerate()
            .map(|(k, &i)| (i, InstId(k as u32)))
            .collect();
        let instructions: Vec<Instruction> = order
            .iter()
            .map(|&i| {
                let mut inst = self.b.inst(i).clone();
                inst.operands = inst.operands.iter().map(|o| remap[o]).collect();
                inst
            })
            .collect();
        let m = Module {
            name: "fold".into(),
            entry: Computation {
                name: "fold".into(),
                instructions,
                outputs: vec![Output {
                    name: "v".into(),
                    value: remap[&id],
                }],
            },
        };
        crate::interp::evaluate(&m, &[]).ok()?.pop()
    }

    fn add(&mut self, inst: &RawInst, op: Op, operands: &[InstId]) -> TResult<InstId> {
        self.b
            .add(&inst.name, op, operands)
            .or_else(|m| err(inst, format!("`{}`: {m}", inst.opcode)))
    }

    fn constant(&mut self, name: &str, lit: Literal) -> InstId {
        self.b.constant(name, lit)
    }

    /// A scalar of `dtype` broadcast to `dims`.
    fn splat(&mut self, inst: &RawInst, dtype: DType, v: f64, dims: &[usize]) -> TResult<InstId> {
        let c = self.constant(
            &format!("{}.c", inst.name),
            literal_from_f64(dtype, vec![], &[v]),
        );
        if dims.is_empty() {
            return Ok(c);
        }
        self.b
            .broadcast(&inst.name, c, vec![], dims.to_vec())
            .or_else(|m| err(inst, m))
    }

    fn check_attrs(&self, inst: &RawInst, allowed: &[&str]) -> TResult<()> {
        for a in &inst.attrs {
            if !allowed.contains(&a.key.as_str()) && !IGNORED_ATTRS.contains(&a.key.as_str()) {
                return err_at(
                    inst.line,
                    a.column,
                    format!(
                        "attribute `{}` of `{}` is not supported",
                        a.key, inst.opcode
                    ),
                );
            }
        }
        Ok(())
    }

    fn need_attr<'i>(&self, inst: &'i RawInst, key: &str) -> TResult<&'i RawAttr> {
        inst.attr(key).map_or_else(
            || {
                err(
                    inst,
                    format!("`{}` needs the attribute `{key}`", inst.opcode),
                )
            },
            Ok,
        )
    }

    fn computation(&self, inst: &RawInst, key: &str) -> TResult<&'m RawComputation> {
        let a = self.need_attr(inst, key)?;
        let name = a.value.trim().trim_start_matches('%');
        self.m.computation(name).map_or_else(
            || {
                err_at(
                    inst.line,
                    a.column,
                    format!("computation `{name}` is not defined in this module"),
                )
            },
            Ok,
        )
    }

    /// Translates computation `c` with its parameters bound to `args`.
    fn call(&mut self, inst: &RawInst, c: &'m RawComputation, args: Vec<Val>) -> TResult<Val> {
        if self.depth >= MAX_CALL_DEPTH {
            return err(
                inst,
                format!("calls nest deeper than {MAX_CALL_DEPTH} levels (recursion?)"),
            );
        }
        self.depth += 1;
        let mut env: HashMap<String, Val> = HashMap::new();
        for p in c.insts.iter().filter(|i| i.opcode == "parameter") {
            let k = param_index(p)?;
            let Some(v) = args.get(k) else {
                return err(
                    inst,
                    format!(
                        "computation `{}` reads parameter {k} but `{}` passes {} operand(s)",
                        c.name,
                        inst.opcode,
                        args.len()
                    ),
                );
            };
            env.insert(p.name.clone(), v.clone());
        }
        let r = self.body(c, env);
        self.depth -= 1;
        r
    }

    /// Translates the non-parameter instructions of `c`; returns the root's value.
    fn body(&mut self, c: &'m RawComputation, mut env: HashMap<String, Val>) -> TResult<Val> {
        for inst in &c.insts {
            if inst.opcode == "parameter" {
                if !env.contains_key(&inst.name) {
                    return err(inst, "parameter without an argument");
                }
                continue;
            }
            let mut ops = Vec::with_capacity(inst.operands.len());
            for (name, col) in &inst.operands {
                match env.get(name) {
                    Some(v) => ops.push(v.clone()),
                    None => {
                        return err_at(
                            inst.line,
                            *col,
                            format!(
                                "operand `{name}` is not defined earlier in computation `{}`",
                                c.name
                            ),
                        );
                    }
                }
            }
            self.count += 1;
            if self.count > MAX_INSTRUCTIONS {
                return err(
                    inst,
                    format!(
                        "the module expands to more than {MAX_INSTRUCTIONS} instructions (deeply nested calls?)"
                    ),
                );
            }
            let v = self.inst(inst, ops)?;
            if let (Val::T(id), RawShape::Array { .. }) = (&v, &inst.shape) {
                let want = array_shape(inst, &inst.shape)?;
                let got = self.shape(*id);
                if got.dtype != want.dtype || got.dims != want.dims {
                    return err(
                        inst,
                        format!(
                            "xla-aot computes {}{} for `{}` but the file says {}{}",
                            got.dtype,
                            dims_str(&got.dims),
                            inst.name,
                            want.dtype,
                            dims_str(&want.dims)
                        ),
                    );
                }
            }
            env.insert(inst.name.clone(), v);
        }
        match c.root() {
            Some(r) => Ok(env[&r.name].clone()),
            None => err_at(c.line, 1, format!("computation `{}` is empty", c.name)),
        }
    }

    fn inst(&mut self, inst: &RawInst, ops: Vec<Val>) -> TResult<Val> {
        let tensor = |k: usize| -> TResult<InstId> {
            match ops.get(k) {
                Some(Val::T(id)) => Ok(*id),
                Some(Val::Tuple(_)) => err_at(
                    inst.line,
                    inst.operands[k].1,
                    format!(
                        "operand `{}` is a tuple; take an element with get-tuple-element",
                        inst.operands[k].0
                    ),
                ),
                None => err(
                    inst,
                    format!("`{}` needs at least {} operand(s)", inst.opcode, k + 1),
                ),
            }
        };
        let arity = |n: usize| -> TResult<()> {
            if ops.len() != n {
                return err(
                    inst,
                    format!(
                        "`{}` takes {n} operand(s), found {}",
                        inst.opcode,
                        ops.len()
                    ),
                );
            }
            Ok(())
        };
        let op = inst.opcode.as_str();
        let unary = |o: &str| -> Option<UnaryOp> {
            UnaryOp::ALL
                .into_iter()
                .find(|u| Op::Unary(*u).opcode() == o)
        };
        let binary = |o: &str| -> Option<BinaryOp> {
            BinaryOp::ALL
                .into_iter()
                .find(|u| Op::Binary(*u).opcode() == o)
        };
        let id = match op {
            "tuple" => {
                self.check_attrs(inst, &[])?;
                if ops.iter().map(Val::depth).max().unwrap_or(0) >= super::syntax::MAX_TUPLE_DEPTH {
                    return err(inst, "tuples nest too deeply");
                }
                return Ok(Val::Tuple(ops));
            }
            "get-tuple-element" => {
                self.check_attrs(inst, &["index"])?;
                arity(1)?;
                let a = self.need_attr(inst, "index")?;
                let k: usize = a
                    .value
                    .trim()
                    .parse()
                    .or_else(|_| err_at(inst.line, a.column, "`index` must be a number"))?;
                return match &ops[0] {
                    Val::Tuple(elems) if k < elems.len() => Ok(elems[k].clone()),
                    _ => err(inst, format!("get-tuple-element index {k} is out of range")),
                };
            }
            "call" | "fusion" => {
                let key = if op == "call" { "to_apply" } else { "calls" };
                self.check_attrs(inst, &[key, "kind"])?;
                let c = self.computation(inst, key)?;
                return self.call(inst, c, ops);
            }
            "constant" => {
                self.check_attrs(inst, &[])?;
                let shape = array_shape(inst, &inst.shape)?;
                let lit = parse_literal(inst, &shape)?;
                self.constant(&inst.name, lit)
            }
            "iota" => {
                self.check_attrs(inst, &["iota_dimension"])?;
                let shape = array_shape(inst, &inst.shape)?;
                let d = usize_list(inst, self.need_attr(inst, "iota_dimension")?)?;
                let d = match d.as_slice() {
                    [d] if *d < shape.rank() => *d,
                    _ => {
                        return err(
                            inst,
                            "`iota_dimension` must name one dimension of the result",
                        );
                    }
                };
                let n = shape.element_count();
                if n > MAX_FOLD_ELEMENTS {
                    return err(
                        inst,
                        format!(
                            "iota of {n} elements is larger than xla-aot folds ({MAX_FOLD_ELEMENTS})"
                        ),
                    );
                }
                let stride: usize = shape.dims[d + 1..].iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|i| ((i / stride) % shape.dims[d]) as f64)
                    .collect();
                self.constant(
                    &inst.name,
                    literal_from_f64(shape.dtype, shape.dims.clone(), &v),
                )
            }
            "copy" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                tensor(0)?
            }
            "convert" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                let x = tensor(0)?;
                let to = array_shape(inst, &inst.shape)?.dtype;
                if self.shape(x).dtype == to {
                    x
                } else {
                    self.add(inst, Op::Convert { to }, &[x])?
                }
            }
            "broadcast" => {
                self.check_attrs(inst, &["dimensions"])?;
                arity(1)?;
                let mut x = tensor(0)?;
                let mut dims = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
                let want = array_shape(inst, &inst.shape)?;
                if dims.windows(2).any(|w| w[0] >= w[1]) {
                    // XLA allows any order; ours is increasing: transpose the operand first.
                    let mut perm: Vec<usize> = (0..dims.len()).collect();
                    perm.sort_by_key(|&i| dims[i]);
                    x = self.add(
                        inst,
                        Op::Transpose {
                            permutation: perm.clone(),
                        },
                        &[x],
                    )?;
                    dims = perm.iter().map(|&i| dims[i]).collect();
                }
                self.b
                    .broadcast(&inst.name, x, dims, want.dims)
                    .or_else(|m| err(inst, format!("`broadcast`: {m}")))?
            }
            "reshape" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                let want = array_shape(inst, &inst.shape)?;
                return self.reshape_val(inst, tensor(0)?, want.dims);
            }
            "transpose" => {
                self.check_attrs(inst, &["dimensions"])?;
                arity(1)?;
                let permutation = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
                self.add(inst, Op::Transpose { permutation }, &[tensor(0)?])?
            }
            "slice" => {
                self.check_attrs(inst, &["slice"])?;
                arity(1)?;
                let a = self.need_attr(inst, "slice")?;
                let (starts, limits, strides) = parse_slice(inst, a)?;
                self.add(
                    inst,
                    Op::Slice {
                        starts,
                        limits,
                        strides,
                    },
                    &[tensor(0)?],
                )?
            }
            "dynamic-slice" => {
                self.check_attrs(inst, &["dynamic_slice_sizes"])?;
                let x = tensor(0)?;
                let sizes = usize_list(inst, self.need_attr(inst, "dynamic_slice_sizes")?)?;
                let rank = self.shape(x).rank();
                if ops.len() != rank + 1 || sizes.len() != rank {
                    return err(
                        inst,
                        format!(
                            "dynamic-slice of a rank-{rank} operand needs {rank} start indices and sizes"
                        ),
                    );
                }
                let mut starts = Vec::new();
                for (k, &size) in sizes.iter().enumerate() {
                    let s = tensor(k + 1)?;
                    let Some(v) = self.const_value(s) else {
                        return with_hint(
                            err_at(
                                inst.line,
                                inst.operands[k + 1].1,
                                "dynamic-slice with a start index computed at run time is not supported",
                            ),
                            "xla-aot compiles static shapes and offsets; make the start index a Python constant",
                        );
                    };
                    let dim = self.shape(x).dims[k];
                    if size > dim {
                        return err(
                            inst,
                            format!("slice size {size} exceeds dimension {k} ({dim})"),
                        );
                    }
                    // XLA clamps the start so the slice stays in bounds.
                    let start = literal_values(&v).first().copied().unwrap_or(0.0);
                    starts.push((start.max(0.0) as usize).min(dim - size));
                }
                let limits: Vec<usize> = starts.iter().zip(&sizes).map(|(s, z)| s + z).collect();
                self.add(
                    inst,
                    Op::Slice {
                        starts,
                        limits,
                        strides: vec![1; rank],
                    },
                    &[x],
                )?
            }
            "concatenate" => {
                self.check_attrs(inst, &["dimensions"])?;
                let d = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
                let [dimension] = d[..] else {
                    return err(inst, "`dimensions` of concatenate must name one dimension");
                };
                let xs = (0..ops.len()).map(&tensor).collect::<TResult<Vec<_>>>()?;
                self.add(inst, Op::Concatenate { dimension }, &xs)?
            }
            "pad" => {
                self.check_attrs(inst, &["padding"])?;
                arity(2)?;
                let a = self.need_attr(inst, "padding")?;
                let (low, high) = parse_padding(inst, a)?;
                self.add(inst, Op::Pad { low, high }, &[tensor(0)?, tensor(1)?])?
            }
            "select" => {
                self.check_attrs(inst, &[])?;
                arity(3)?;
                let (mut p, t, f) = (tensor(0)?, tensor(1)?, tensor(2)?);
                let dims = self.shape(t).dims.clone();
                if self.shape(p).rank() == 0 && !dims.is_empty() {
                    p = self
                        .b
                        .broadcast(&inst.name, p, vec![], dims)
                        .or_else(|m| err(inst, m))?;
                }
                self.elementwise(inst, Op::Select, &[p, t, f])?
            }
            "clamp" => {
                self.check_attrs(inst, &[])?;
                arity(3)?;
                self.elementwise(inst, Op::Clamp, &[tensor(0)?, tensor(1)?, tensor(2)?])?
            }
            "compare" => {
                self.check_attrs(inst, &["direction", "type"])?;
                arity(2)?;
                if let Some(t) = inst.attr("type") {
                    if !matches!(t.value.trim(), "FLOAT" | "SIGNED" | "UNSIGNED") {
                        return err_at(
                            inst.line,
                            t.column,
                            format!(
                                "comparison type `{}` is not supported (FLOAT, SIGNED, UNSIGNED)",
                                t.value.trim()
                            ),
                        );
                    }
                }
                let a = self.need_attr(inst, "direction")?;
                let dir = CompareDir::ALL
                    .into_iter()
                    .find(|d| d.name() == a.value.trim())
                    .map_or_else(
                        || {
                            err_at(
                                inst.line,
                                a.column,
                                format!("unknown comparison direction `{}`", a.value),
                            )
                        },
                        Ok,
                    )?;
                self.elementwise(inst, Op::Compare(dir), &[tensor(0)?, tensor(1)?])?
            }
            "and" | "or" | "xor" | "not" => {
                self.check_attrs(inst, &[])?;
                let xs = (0..ops.len()).map(&tensor).collect::<TResult<Vec<_>>>()?;
                arity(if op == "not" { 1 } else { 2 })?;
                self.logical(inst, &xs)?
            }
            "exponential-minus-one" | "log-plus-one" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                self.expm1_log1p(inst, tensor(0)?)?
            }
            _ if unary(op).is_some() => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                self.elementwise(inst, Op::Unary(unary(op).expect("checked")), &[tensor(0)?])?
            }
            _ if binary(op).is_some() => {
                self.check_attrs(inst, &[])?;
                arity(2)?;
                let o = Op::Binary(binary(op).expect("checked"));
                self.elementwise(inst, o, &[tensor(0)?, tensor(1)?])?
            }
            "dot" => {
                self.check_attrs(
                    inst,
                    &[
                        "lhs_batch_dims",
                        "lhs_contracting_dims",
                        "rhs_batch_dims",
                        "rhs_contracting_dims",
                    ],
                )?;
                arity(2)?;
                let list = |k: &str| -> TResult<Vec<usize>> {
                    match inst.attr(k) {
                        Some(a) => usize_list(inst, a),
                        None => Ok(vec![]),
                    }
                };
                let d = DotDims {
                    lhs_batch: list("lhs_batch_dims")?,
                    lhs_contracting: list("lhs_contracting_dims")?,
                    rhs_batch: list("rhs_batch_dims")?,
                    rhs_contracting: list("rhs_contracting_dims")?,
                };
                self.add(inst, Op::Dot(d), &[tensor(0)?, tensor(1)?])?
            }
            "convolution" => {
                self.check_attrs(
                    inst,
                    &[
                        "window",
                        "dim_labels",
                        "feature_group_count",
                        "batch_group_count",
                    ],
                )?;
                arity(2)?;
                self.convolution(inst, tensor(0)?, tensor(1)?)?
            }
            "reduce" => {
                self.check_attrs(inst, &["dimensions", "to_apply"])?;
                return self.reduce(inst, &ops);
            }
            "reduce-window" => {
                self.check_attrs(inst, &["window", "to_apply"])?;
                arity(2)?;
                self.reduce_window(inst, tensor(0)?, tensor(1)?)?
            }
            "parameter" => return err(inst, "parameter outside the start of a computation"),
            _ => {
                return with_hint(
                    err(
                        inst,
                        format!("opcode `{op}` is not supported by the HLO importer"),
                    ),
                    &format!("supported opcodes: {}", SUPPORTED.join(", ")),
                );
            }
        };
        Ok(Val::T(id))
    }

    fn reshape_val(&mut self, inst: &RawInst, x: InstId, dims: Vec<usize>) -> TResult<Val> {
        if self.shape(x).dims == dims {
            return Ok(Val::T(x));
        }
        self.b
            .reshape(&inst.name, x, dims)
            .map(Val::T)
            .or_else(|m| err(inst, format!("`reshape`: {m}")))
    }

    /// An elementwise op: on floats it is emitted; on integers or preds (which xla-aot computes
    /// only as indices and masks) it is evaluated now when every operand is a constant.
    fn elementwise(&mut self, inst: &RawInst, op: Op, xs: &[InstId]) -> TResult<InstId> {
        let float = |s: &Shape| s.dtype == DType::F32;
        let numeric_ok = match &op {
            Op::Select => float(self.shape(xs[1])) || self.shape(xs[1]).dtype == DType::Pred,
            _ => xs.iter().all(|&x| float(self.shape(x))),
        };
        if numeric_ok {
            return self.add(inst, op, xs);
        }
        let consts: Option<Vec<Literal>> = xs.iter().map(|&x| self.const_value(x)).collect();
        let Some(consts) = consts else {
            return with_hint(
                err(
                    inst,
                    format!(
                        "`{}` on {} values computed at run time is not supported: xla-aot computes in f32 (s32 only as indices)",
                        inst.opcode,
                        self.shape(xs[0]).dtype
                    ),
                ),
                "convert the values to float32 in the exported function",
            );
        };
        let vals: Vec<Vec<f64>> = consts.iter().map(literal_values).collect();
        let shape = self.shape(xs[xs.len() - 1]).clone();
        let n = shape.element_count();
        if vals.iter().any(|v| v.len() != n && v.len() != 1) {
            return err(
                inst,
                format!("the operands of `{}` have different shapes", inst.opcode),
            );
        }
        let at = |k: usize, i: usize| -> f64 {
            let v = &vals[k];
            if v.len() == 1 { v[0] } else { v[i] }
        };
        let (dtype, out): (DType, Vec<f64>) = match &op {
            Op::Binary(b) => {
                let int = shape.dtype != DType::F32;
                let f = |x: f64, y: f64| -> f64 {
                    match b {
                        BinaryOp::Add => x + y,
                        BinaryOp::Subtract => x - y,
                        BinaryOp::Multiply => x * y,
                        BinaryOp::Divide if int => {
                            if y == 0.0 {
                                -1.0
                            } else {
                                (x / y).trunc()
                            }
                        }
                        BinaryOp::Divide => x / y,
                        BinaryOp::Maximum => x.max(y),
                        BinaryOp::Minimum => x.min(y),
                        BinaryOp::Power => x.powf(y),
                    }
                };
                let wrap = |v: f64| if int { (v as i64) as i32 as f64 } else { v };
                (
                    shape.dtype,
                    (0..n).map(|i| wrap(f(at(0, i), at(1, i)))).collect(),
                )
            }
            Op::Unary(UnaryOp::Negate) => (shape.dtype, (0..n).map(|i| -at(0, i)).collect()),
            Op::Unary(UnaryOp::Abs) => (shape.dtype, (0..n).map(|i| at(0, i).abs()).collect()),
            Op::Compare(d) => {
                let f = |x: f64, y: f64| match d {
                    CompareDir::Eq => x == y,
                    CompareDir::Ne => x != y,
                    CompareDir::Lt => x < y,
                    CompareDir::Le => x <= y,
                    CompareDir::Gt => x > y,
                    CompareDir::Ge => x >= y,
                };
                let shape0 = self.shape(xs[0]).clone();
                let n = shape0.element_count();
                return Ok(self.constant(
                    &inst.name,
                    literal_from_f64(
                        DType::Pred,
                        shape0.dims,
                        &(0..n)
                            .map(|i| f(at(0, i), at(1, i)) as u8 as f64)
                            .collect::<Vec<_>>(),
                    ),
                ));
            }
            Op::Select => (
                shape.dtype,
                (0..n)
                    .map(|i| if at(0, i) != 0.0 { at(1, i) } else { at(2, i) })
                    .collect(),
            ),
            Op::Clamp => {
                let x = self.shape(xs[1]).clone();
                let n = x.element_count();
                let v: Vec<f64> = (0..n)
                    .map(|i| at(1, i).max(at(0, i)).min(at(2, i)))
                    .collect();
                return Ok(self.constant(&inst.name, literal_from_f64(x.dtype, x.dims, &v)));
            }
            _ => {
                return err(
                    inst,
                    format!(
                        "`{}` on {} values is not supported",
                        inst.opcode,
                        self.shape(xs[0]).dtype
                    ),
                );
            }
        };
        Ok(self.constant(&inst.name, literal_from_f64(dtype, shape.dims, &out)))
    }

    /// `and`, `or`, `xor`, `not` on pred values as selects (on constants: evaluated).
    fn logical(&mut self, inst: &RawInst, xs: &[InstId]) -> TResult<InstId> {
        let dtype = self.shape(xs[0]).dtype;
        let dims = self.shape(xs[0]).dims.clone();
        if let Some(c) = xs
            .iter()
            .map(|&x| self.const_value(x))
            .collect::<Option<Vec<_>>>()
        {
            let v: Vec<Vec<f64>> = c.iter().map(literal_values).collect();
            let n: usize = dims.iter().product();
            if v.iter().any(|w| w.len() != n) {
                return err(
                    inst,
                    format!("the operands of `{}` have different shapes", inst.opcode),
                );
            }
            let int = dtype == DType::I32;
            let out: Vec<f64> = (0..n)
                .map(|i| {
                    let a = v[0][i];
                    let b = v.get(1).map_or(0.0, |w| w[i]);
                    if int {
                        let (a, b) = (a as i32, b as i32);
                        (match inst.opcode.as_str() {
                            "and" => a & b,
                            "or" => a | b,
                            "xor" => a ^ b,
                            _ => !a,
                        }) as f64
                    } else {
                        let (a, b) = (a != 0.0, b != 0.0);
                        (match inst.opcode.as_str() {
                            "and" => a && b,
                            "or" => a || b,
                            "xor" => a != b,
                            _ => !a,
                        }) as u8 as f64
                    }
                })
                .collect();
            return Ok(self.constant(&inst.name, literal_from_f64(dtype, dims, &out)));
        }
        if dtype != DType::Pred {
            return err(
                inst,
                format!(
                    "`{}` on run-time {dtype} values is not supported (only pred)",
                    inst.opcode
                ),
            );
        }
        let t = self.splat(inst, DType::Pred, 1.0, &dims)?;
        let f = self.splat(inst, DType::Pred, 0.0, &dims)?;
        let ops: [InstId; 3] = match inst.opcode.as_str() {
            "and" => [xs[0], xs[1], f],
            "or" => [xs[0], t, xs[1]],
            "not" => [xs[0], f, t],
            _ => {
                let nb = self.add(inst, Op::Select, &[xs[1], f, t])?;
                [xs[0], nb, xs[1]]
            }
        };
        self.add(inst, Op::Select, &ops)
    }

    /// `exp(x) - 1` and `log(1 + x)` without cancellation near 0 (Kahan's formulas: with
    /// `u = e^x` (or `1 + x`) rounded, `(u - 1) * x / log(u)` (or `log(u) * x / (u - 1)`) is
    /// accurate to a few ulps; `u == 1` means `x` itself is the answer).
    fn expm1_log1p(&mut self, inst: &RawInst, x: InstId) -> TResult<InstId> {
        if self.shape(x).dtype != DType::F32 {
            return err(inst, format!("`{}` needs f32 operands", inst.opcode));
        }
        let dims = self.shape(x).dims.clone();
        let one = self.splat(inst, DType::F32, 1.0, &dims)?;
        let add = |t: &mut Self, op: Op, o: &[InstId]| t.add(inst, op, o);
        let expm1 = inst.opcode == "exponential-minus-one";
        let u = if expm1 {
            add(self, Op::Unary(UnaryOp::Exp), &[x])?
        } else {
            add(self, Op::Binary(BinaryOp::Add), &[one, x])?
        };
        let um1 = add(self, Op::Binary(BinaryOp::Subtract), &[u, one])?;
        let lu = add(self, Op::Unary(UnaryOp::Log), &[u])?;
        let r = if expm1 {
            let q = add(self, Op::Binary(BinaryOp::Divide), &[x, lu])?;
            add(self, Op::Binary(BinaryOp::Multiply), &[um1, q])?
        } else {
            let q = add(self, Op::Binary(BinaryOp::Divide), &[x, um1])?;
            add(self, Op::Binary(BinaryOp::Multiply), &[lu, q])?
        };
        let is_one = add(self, Op::Compare(CompareDir::Eq), &[u, one])?;
        let r = add(self, Op::Select, &[is_one, x, r])?;
        if expm1 {
            // e^x rounds to 0 for x < -88: the answer is -1 (the formula would give 0/0 or -inf/-inf);
            // e^x = inf for x > 88: the answer is inf.
            let zero = self.splat(inst, DType::F32, 0.0, &dims)?;
            let m1 = self.splat(inst, DType::F32, -1.0, &dims)?;
            let under = add(self, Op::Compare(CompareDir::Eq), &[u, zero])?;
            let r = add(self, Op::Select, &[under, m1, r])?;
            let inf = self.splat(inst, DType::F32, f64::INFINITY, &dims)?;
            let over = add(self, Op::Compare(CompareDir::Eq), &[u, inf])?;
            add(self, Op::Select, &[over, inf, r])
        } else {
            // 1 + x = inf: log1p is inf too.
            let inf = self.splat(inst, DType::F32, f64::INFINITY, &dims)?;
            let over = add(self, Op::Compare(CompareDir::Eq), &[u, inf])?;
            add(self, Op::Select, &[over, inf, r])
        }
    }

    /// The combiner of a reduce's called computation: a single add, maximum or minimum of its two
    /// parameters.
    fn reducer(&self, inst: &RawInst, c: &RawComputation) -> TResult<ReduceKind> {
        let params: Vec<&RawInst> = c.insts.iter().filter(|i| i.opcode == "parameter").collect();
        let root = c.root();
        let refuse = || {
            with_hint(
                err(
                    inst,
                    format!(
                        "the reduction computation `{}` is not a single add, maximum or minimum of its two parameters",
                        c.name
                    ),
                ),
                "xla-aot reduces with sum, max and min (JAX: jnp.sum/mean/max/min, lax.reduce_window with add/max/min)",
            )
        };
        let (Some(root), 2) = (root, params.len()) else {
            return refuse();
        };
        let kind = match root.opcode.as_str() {
            "add" => ReduceKind::Add,
            "maximum" => ReduceKind::Max,
            "minimum" => ReduceKind::Min,
            _ => return refuse(),
        };
        let mut names: Vec<&str> = root.operands.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        let mut pnames: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        pnames.sort();
        if names != pnames || c.insts.len() != 3 {
            return refuse();
        }
        Ok(kind)
    }

    fn identity(kind: ReduceKind) -> f64 {
        match kind {
            ReduceKind::Add => 0.0,
            ReduceKind::Max => f64::NEG_INFINITY,
            ReduceKind::Min => f64::INFINITY,
        }
    }

    fn reduce(&mut self, inst: &RawInst, ops: &[Val]) -> TResult<Val> {
        let dims = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
        let c = self.computation(inst, "to_apply")?;
        let ts: Vec<InstId> = ops
            .iter()
            .map(|v| match v {
                Val::T(id) => Ok(*id),
                Val::Tuple(_) => err(inst, "reduce operands must be arrays"),
            })
            .collect::<TResult<_>>()?;
        let mut sorted = dims.clone();
        sorted.sort();
        sorted.dedup();
        if ts.len() == 4 {
            return self.arg_reduce(inst, c, &ts, &sorted);
        }
        if ts.len() != 2 {
            return err(
                inst,
                format!(
                    "reduce of {} operands is not supported (one input and its initial value, or JAX's argmax/argmin form)",
                    ts.len() / 2
                ),
            );
        }
        let kind = self.reducer(inst, c)?;
        let (x, init) = (ts[0], ts[1]);
        if self.shape(x).dtype != DType::F32 {
            return err(
                inst,
                format!(
                    "reduce of {} values is not supported (f32 only)",
                    self.shape(x).dtype
                ),
            );
        }
        let r = self.add(
            inst,
            Op::Reduce {
                kind,
                dimensions: sorted,
            },
            &[x],
        )?;
        let init_v = self.const_value(init).map(|l| literal_values(&l));
        if init_v.as_deref() == Some(&[Self::identity(kind)][..]) {
            return Ok(Val::T(r));
        }
        // A non-identity initial value is combined once with the result (add, max and min are
        // associative and commutative).
        let out_dims = self.shape(r).dims.clone();
        let i = if out_dims.is_empty() {
            init
        } else {
            self.b
                .broadcast(&inst.name, init, vec![], out_dims)
                .or_else(|m| err(inst, m))?
        };
        let b = match kind {
            ReduceKind::Add => BinaryOp::Add,
            ReduceKind::Max => BinaryOp::Maximum,
            ReduceKind::Min => BinaryOp::Minimum,
        };
        Ok(Val::T(self.add(inst, Op::Binary(b), &[r, i])?))
    }

    /// JAX's argmax/argmin: `reduce((x, iota), (±inf, 0))` over one dimension with a comparator
    /// that keeps the larger (smaller) value and the first index.
    fn arg_reduce(
        &mut self,
        inst: &RawInst,
        c: &RawComputation,
        ts: &[InstId],
        dims: &[usize],
    ) -> TResult<Val> {
        let refuse = |why: &str| {
            with_hint(
                err(
                    inst,
                    format!("this variadic reduce is not an argmax or argmin: {why}"),
                ),
                "xla-aot reads the variadic reduce JAX emits for jnp.argmax / jnp.argmin over one axis",
            )
        };
        let [d] = dims[..] else {
            return refuse("it reduces more than one dimension");
        };
        let (x, idx) = (ts[0], ts[1]);
        if d >= self.shape(x).rank() || self.shape(idx).dims != self.shape(x).dims {
            return refuse("the dimension or the operand shapes do not fit");
        }
        if self.shape(x).dims[d] == 0 {
            return refuse("the reduced dimension is empty");
        }
        if self.shape(x).dtype != DType::F32 || self.shape(idx).dtype != DType::I32 {
            return refuse("the operands are not (f32 values, s32 indices)");
        }
        // The comparison of the two values (parameters 0 and 2) decides max or min.
        let pname = |k: usize| {
            c.insts
                .iter()
                .find(|i| i.opcode == "parameter" && param_index(i).ok() == Some(k))
                .map(|i| i.name.as_str())
        };
        let (p0, p2) = (pname(0), pname(2));
        let dir = c.insts.iter().find_map(|i| {
            if i.opcode != "compare" || i.operands.len() != 2 {
                return None;
            }
            let (a, b) = (
                Some(i.operands[0].0.as_str()),
                Some(i.operands[1].0.as_str()),
            );
            let d = i.attr("direction")?.value.trim();
            if a == p0 && b == p2 {
                Some(d == "GT" || d == "GE").filter(|_| matches!(d, "GT" | "GE" | "LT" | "LE"))
            } else if a == p2 && b == p0 {
                Some(d == "LT" || d == "LE").filter(|_| matches!(d, "GT" | "GE" | "LT" | "LE"))
            } else {
                None
            }
        });
        let Some(max) = dir else {
            return refuse("its comparator does not order the two values with GT or LT");
        };
        // The initial values must be the identities: (-inf, 0) for argmax, (+inf, 0) for argmin.
        let want = if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        let v_init = self.const_value(ts[2]).map(|l| literal_values(&l));
        let i_init = self.const_value(ts[3]).map(|l| literal_values(&l));
        if v_init.as_deref() != Some(&[want][..]) || i_init.as_deref() != Some(&[0.0][..]) {
            return refuse(
                "its initial values are not (-inf, 0) for argmax or (+inf, 0) for argmin",
            );
        }
        let is_iota = self.const_value(idx).is_some_and(|l| {
            let dims_x = &self.shape(x).dims;
            let stride: usize = dims_x[d + 1..].iter().product();
            literal_values(&l)
                .iter()
                .enumerate()
                .all(|(i, &v)| v == ((i / stride) % dims_x[d]) as f64)
        });
        if !is_iota {
            return refuse("the second operand is not an iota along the reduced dimension");
        }
        let src = if max {
            x
        } else {
            self.add(inst, Op::Unary(UnaryOp::Negate), &[x])?
        };
        let kind = if max {
            ReduceKind::Max
        } else {
            ReduceKind::Min
        };
        let values = self.add(
            inst,
            Op::Reduce {
                kind,
                dimensions: vec![d],
            },
            &[x],
        )?;
        let index = self.add(inst, Op::Argmax { dimension: d }, &[src])?;
        Ok(Val::Tuple(vec![Val::T(values), Val::T(index)]))
    }

    fn reduce_window(&mut self, inst: &RawInst, x: InstId, init: InstId) -> TResult<InstId> {
        let c = self.computation(inst, "to_apply")?;
        let kind = self.reducer(inst, c)?;
        let rank = self.shape(x).rank();
        let window = parse_window(inst, self.need_attr(inst, "window")?, rank)?;
        let init_v = self.const_value(init).map(|l| literal_values(&l));
        if init_v.as_deref() != Some(&[Self::identity(kind)][..]) {
            return err(
                inst,
                format!(
                    "reduce-window with an initial value other than the identity of {} is not supported",
                    kind.name()
                ),
            );
        }
        self.add(inst, Op::ReduceWindow { kind, window }, &[x])
    }

    /// Any `dim_labels` layout: the operands are transposed into `bf01_oi01`, the result back.
    fn convolution(&mut self, inst: &RawInst, x: InstId, k: InstId) -> TResult<InstId> {
        let groups = match inst.attr("feature_group_count") {
            Some(a) => a.value.trim().parse::<usize>().or_else(|_| {
                err_at(
                    inst.line,
                    a.column,
                    "`feature_group_count` must be a positive number",
                )
            })?,
            None => 1,
        };
        if let Some(a) = inst.attr("batch_group_count") {
            if a.value.trim() != "1" {
                return err_at(
                    inst.line,
                    a.column,
                    "`batch_group_count` other than 1 (a weight-gradient convolution) is not supported",
                );
            }
        }
        let rank = self.shape(x).rank();
        let labels = self.need_attr(inst, "dim_labels")?;
        let bad = || {
            err_at(
                inst.line,
                labels.column,
                format!("malformed dim_labels `{}`", labels.value),
            )
        };
        let Some((lhs, rest)) = labels.value.trim().split_once('_') else {
            return bad();
        };
        let Some((rhs, out)) = rest.split_once("->") else {
            return bad();
        };
        let spatial = rank.saturating_sub(2);
        // Position of each logical dim (batch/feature first, then spatial 0..) in a label string.
        let order = |s: &str, a: char, b: char| -> Option<Vec<usize>> {
            if s.len() != rank {
                return None;
            }
            let mut p = vec![s.find(a)?, s.find(b)?];
            for i in 0..spatial {
                p.push(s.find(char::from_digit(i as u32, 10)?)?);
            }
            Some(p)
        };
        let (Some(lp), Some(rp), Some(op)) = (
            order(lhs, 'b', 'f'),
            order(rhs, 'o', 'i'),
            order(out, 'b', 'f'),
        ) else {
            return bad();
        };
        let window = match inst.attr("window") {
            Some(a) => parse_window(inst, a, spatial)?,
            None => Window::new(vec![1; spatial]),
        };
        let identity: Vec<usize> = (0..rank).collect();
        let xt = if lp == identity {
            x
        } else {
            self.add(inst, Op::Transpose { permutation: lp }, &[x])?
        };
        let kt = if rp == identity {
            k
        } else {
            self.add(inst, Op::Transpose { permutation: rp }, &[k])?
        };
        let y = self.add(
            inst,
            Op::Convolution {
                window,
                feature_group_count: groups,
            },
            &[xt, kt],
        )?;
        if op == identity {
            return Ok(y);
        }
        // Result dim j holds logical dim inv[j].
        let mut perm = vec![0; rank];
        for (logical, &pos) in op.iter().enumerate() {
            perm[pos] = logical;
        }
        self.add(inst, Op::Transpose { permutation: perm }, &[y])
    }
}

fn param_index(p: &RawInst) -> TResult<usize> {
    p.args_text.trim().parse::<usize>().or_else(|_| {
        err(
            p,
            format!("parameter number `{}` is not a number", p.args_text.trim()),
        )
    })
}

/// `{[0:2], [1:3:2]}`.
fn parse_slice(inst: &RawInst, a: &RawAttr) -> TResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
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
fn parse_padding(inst: &RawInst, a: &RawAttr) -> TResult<(Vec<usize>, Vec<usize>)> {
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

fn flatten(v: &Val, out: &mut Vec<InstId>) {
    match v {
        Val::T(id) => out.push(*id),
        Val::Tuple(vs) => vs.iter().for_each(|v| flatten(v, out)),
    }
}

/// Translates the entry computation of `m` into a module called `name`.
pub fn translate(m: &RawModule, name: &str, bindings: &mut Bindings) -> TResult<Module> {
    let entry = m
        .computations
        .iter()
        .find(|c| c.is_entry)
        .or_else(|| m.computations.last());
    let Some(entry) = entry else {
        return err_at(1, 1, "the module has no computations");
    };
    let mut tr = Tr {
        m,
        b: Builder::new(name),
        bindings,
        depth: 0,
        count: 0,
    };
    // Parameters in number order (the text order may differ).
    let mut params: Vec<(usize, &RawInst)> = Vec::new();
    for p in entry.insts.iter().filter(|i| i.opcode == "parameter") {
        params.push((param_index(p)?, p));
    }
    params.sort_by_key(|(k, _)| *k);
    for (i, (k, p)) in params.iter().enumerate() {
        if *k != i {
            return err(
                p,
                format!(
                    "entry parameters must be numbered 0..{}; {} is missing",
                    params.len(),
                    i
                ),
            );
        }
    }
    let mut env: HashMap<String, Val> = HashMap::new();
    let mut taken: HashSet<String> = HashSet::new();
    for (_, p) in &params {
        let shape = match &p.shape {
            RawShape::Tuple(_) => {
                return with_hint(
                    err(p, "tuple-typed entry parameters are not supported"),
                    "pass each array as its own argument",
                );
            }
            s => array_shape(p, s)?,
        };
        let base = stripped_param_name(&p.name).to_string();
        let mut cname = input_name(&p.name);
        let id = match tr.bindings.take(&[&base, &cname], &shape) {
            Some(Ok(lit)) => tr.b.constant(&cname, lit),
            Some(Err(msg)) => return err(p, msg),
            None => {
                let stem = cname.clone();
                let mut n = 2;
                while !taken.insert(cname.clone()) {
                    cname = format!("{stem}_{n}");
                    n += 1;
                }
                tr.b.parameter(&cname, shape).or_else(|m| err(p, m))?
            }
        };
        env.insert(p.name.clone(), Val::T(id));
    }
    let root = tr.body(entry, env)?;
    let mut outs = Vec::new();
    flatten(&root, &mut outs);
    if outs.is_empty() {
        return err_at(entry.line, 1, "the entry computation returns nothing");
    }
    let single = outs.len() == 1;
    for (i, id) in outs.into_iter().enumerate() {
        let name = if single {
            "out".to_string()
        } else {
            format!("out_{i}")
        };
        tr.b.output(&name, id);
    }
    Ok(tr.b.finish())
}
