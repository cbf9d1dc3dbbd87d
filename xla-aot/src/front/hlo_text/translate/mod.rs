//! XLA HLO instructions → xla-aot HLO: the opcode-by-opcode translation of a parsed module.
//!
//! Contract: [`translate`] turns the ENTRY computation of a [`RawModule`] into a module built with
//! [`Builder`] (so every result shape is inferred and then checked against the shape XLA printed),
//! inlining `call` and `fusion`, recognising the called computations of `reduce` and
//! `reduce-window` (a single add, maximum or minimum), and the variadic reduce JAX emits for
//! `argmax`/`argmin`. Integer and boolean arithmetic (index computations) is evaluated at import
//! time when its operands are constants; on run-time values it is an error, because xla-aot
//! computes in f32 (with i32 indices and pred masks). Every error names the line and column of the
//! instruction and, where it helps, how to export the model differently. Files: the translation
//! state and calls here, `attrs` (shapes, attributes, literals), `inst` (the opcode dispatch),
//! `elementwise`, `reduce`, `conv`.

mod attrs;
mod conv;
mod elementwise;
mod inst;
mod reduce;

use attrs::{array_shape, input_name, literal_from_f64, stripped_param_name};

use super::syntax::{RawAttr, RawComputation, RawInst, RawModule, RawShape};
use crate::front::weights::Bindings;
use crate::ir::shape::dims_str;
use crate::ir::{
    Builder, Computation, DType, InstId, Instruction, Literal, Module, Op, Output, Shape,
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

/// Opcodes the translator handles besides the elementwise functions of the op table
/// (`ir/inst/table.rs`, every one of which it translates by name).
const STRUCTURAL: &[&str] = &[
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
    "exponential-minus-one",
    "log-plus-one",
    "dot",
    "convolution",
    "reduce",
    "reduce-window",
];

/// Every opcode the translator handles, for the error on any other.
fn supported() -> Vec<&'static str> {
    let mut all: Vec<&str> = STRUCTURAL.to_vec();
    all.extend(crate::ir::UnaryOp::all().map(|u| u.info().opcode));
    all.extend(crate::ir::BinaryOp::all().map(|b| b.info().opcode));
    all
}

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
            api: Default::default(),
            precision: Default::default(),
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
}

fn param_index(p: &RawInst) -> TResult<usize> {
    p.args_text.trim().parse::<usize>().or_else(|_| {
        err(
            p,
            format!("parameter number `{}` is not a number", p.args_text.trim()),
        )
    })
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
    // The sort is stable: of two parameters with one number, the later in the text comes second.
    for pair in params.windows(2) {
        let ((k0, first), (k1, second)) = (pair[0], pair[1]);
        if k0 == k1 {
            return with_hint(
                err(
                    second,
                    format!(
                        "parameter number {k1} is used twice: `{}` (line {}) already has it",
                        crate::util::shorten::shorten(&first.name),
                        first.line
                    ),
                ),
                "number the entry's parameters 0, 1, 2, ... once each",
            );
        }
    }
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
