//! Building computations with inferred shapes and unique names.
//!
//! Contract: every `add_*` method checks its operands with the rules of `shape_inference.rs` and
//! returns the new instruction's id, or the rule's message. Names are made unique by appending
//! `.1`, `.2`, ... to the requested name, so a lowering can name intermediates after the spec op
//! they come from (`bn.scale`). Instructions are appended, so the order is always topological.

use super::inst::{Computation, Output};
use super::inst::{InstId, Instruction, Op};
use super::literal::Literal;
use super::module::Module;
use super::shape::{DType, Shape, check_rank, checked_element_count, dims_str};
use super::shape_inference::{check_broadcast, check_reshape, infer_shape};
use std::collections::{HashMap, HashSet};

/// Incrementally builds the entry computation of a module.
#[derive(Debug)]
pub struct Builder {
    name: String,
    instructions: Vec<Instruction>,
    names: HashSet<String>,
    next_suffix: HashMap<String, usize>,
    outputs: Vec<Output>,
    params: usize,
}

impl Builder {
    /// A builder for a module called `name`.
    pub fn new(name: &str) -> Builder {
        Builder {
            name: name.to_string(),
            instructions: Vec::new(),
            names: HashSet::new(),
            next_suffix: HashMap::new(),
            outputs: Vec::new(),
            params: 0,
        }
    }

    /// The shape of an instruction built so far.
    pub fn shape(&self, id: InstId) -> &Shape {
        &self.instructions[id.index()].shape
    }

    /// The instruction built so far.
    pub fn inst(&self, id: InstId) -> &Instruction {
        &self.instructions[id.index()]
    }

    fn unique_name(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        // Resume after the last suffix given for this base (a model repeating one name a million
        // times must not take a million probes per instruction).
        let n = self.next_suffix.entry(base.to_string()).or_insert(1);
        while self.names.contains(&name) {
            name = format!("{base}.{n}");
            *n += 1;
        }
        self.names.insert(name.clone());
        name
    }

    fn push(&mut self, name: &str, op: Op, operands: Vec<InstId>, shape: Shape) -> InstId {
        let name = self.unique_name(name);
        self.instructions.push(Instruction {
            name,
            op,
            operands,
            shape,
        });
        InstId((self.instructions.len() - 1) as u32)
    }

    /// The next entry parameter, with a declared shape.
    pub fn parameter(&mut self, name: &str, shape: Shape) -> Result<InstId, String> {
        check_rank(&shape.dims)?;
        if checked_element_count(&shape.dims).is_none() {
            return Err(format!("{} has too many elements", dims_str(&shape.dims)));
        }
        let index = self.params;
        self.params += 1;
        Ok(self.push(name, Op::Parameter { index }, Vec::new(), shape))
    }

    /// A constant.
    pub fn constant(&mut self, name: &str, literal: Literal) -> InstId {
        let shape = Shape::new(literal.dtype, literal.dims.clone());
        self.push(name, Op::Constant(literal), Vec::new(), shape)
    }

    /// A scalar f32 constant.
    pub fn scalar(&mut self, name: &str, v: f32) -> InstId {
        self.constant(name, Literal::scalar_f32(v))
    }

    /// Any op whose result shape is inferred (everything but broadcast and reshape).
    pub fn add(&mut self, name: &str, op: Op, operands: &[InstId]) -> Result<InstId, String> {
        let shapes: Vec<&Shape> = operands.iter().map(|&o| self.shape(o)).collect();
        let shape = infer_shape(&op, &shapes)?;
        check_rank(&shape.dims)?;
        Ok(self.push(name, op, operands.to_vec(), shape))
    }

    /// Broadcast `x` into `result` dims, operand dim i going to result dim `dimensions[i]`.
    pub fn broadcast(
        &mut self,
        name: &str,
        x: InstId,
        dimensions: Vec<usize>,
        result: Vec<usize>,
    ) -> Result<InstId, String> {
        check_broadcast(&dimensions, self.shape(x), &result)?;
        check_rank(&result)?;
        if checked_element_count(&result).is_none() {
            return Err(format!("{} has too many elements", dims_str(&result)));
        }
        let shape = Shape::new(self.shape(x).dtype, result);
        Ok(self.push(name, Op::Broadcast { dimensions }, vec![x], shape))
    }

    /// Reshape `x` to `result` dims.
    pub fn reshape(&mut self, name: &str, x: InstId, result: Vec<usize>) -> Result<InstId, String> {
        check_reshape(self.shape(x), &result)?;
        check_rank(&result)?;
        let shape = Shape::new(self.shape(x).dtype, result);
        Ok(self.push(name, Op::Reshape, vec![x], shape))
    }

    /// Marks `value` as the output called `name`.
    pub fn output(&mut self, name: &str, value: InstId) {
        self.outputs.push(Output {
            name: name.to_string(),
            value,
        });
    }

    /// The dtype of an instruction.
    pub fn dtype(&self, id: InstId) -> DType {
        self.shape(id).dtype
    }

    /// Finishes the module.
    pub fn finish(self) -> Module {
        Module {
            name: self.name,
            entry: Computation {
                name: "main".to_string(),
                instructions: self.instructions,
                outputs: self.outputs,
            },
            api: crate::ir::ApiTypes::default(),
            precision: crate::ir::Precision::F32,
        }
    }
}
