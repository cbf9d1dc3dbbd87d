//! HLO modules and computations.
//!
//! Contract: a [`Module`] has a name (the C prefix of the generated library) and one entry
//! [`Computation`]. A computation is a list of instructions in a topological order (operands come
//! before their users), followed by its named outputs. The verifier (`verify.rs`) checks every
//! invariant; the printer and parser (`print.rs`, `parse.rs`) give the text form with
//! `parse(print(m)) == m`.

use super::inst::{InstId, Instruction, Op};

/// A named result of a computation; the name is the one the C API and `.npy` outputs use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Output {
    /// Output name (from the spec's `outputs`).
    pub name: String,
    /// The instruction that produces it.
    pub value: InstId,
}

/// A list of instructions in topological order, and its outputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Computation {
    /// Computation name (`main` for the entry).
    pub name: String,
    /// Instructions; an instruction's operands have smaller indices.
    pub instructions: Vec<Instruction>,
    /// The values the computation returns, in order (printed as the ROOT tuple).
    pub outputs: Vec<Output>,
}

impl Computation {
    /// The instruction with a given id.
    pub fn inst(&self, id: InstId) -> &Instruction {
        &self.instructions[id.index()]
    }

    /// Ids of all instructions in order.
    pub fn ids(&self) -> impl Iterator<Item = InstId> + '_ {
        (0..self.instructions.len()).map(|i| InstId(i as u32))
    }

    /// The parameters in index order.
    pub fn parameters(&self) -> Vec<InstId> {
        let mut params: Vec<(usize, InstId)> = self
            .ids()
            .filter_map(|id| match self.inst(id).op {
                Op::Parameter { index } => Some((index, id)),
                _ => None,
            })
            .collect();
        params.sort();
        params.into_iter().map(|(_, id)| id).collect()
    }

    /// Finds an instruction by name.
    pub fn find(&self, name: &str) -> Option<InstId> {
        self.instructions
            .iter()
            .position(|i| i.name == name)
            .map(|i| InstId(i as u32))
    }
}

/// A compilation unit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Module {
    /// Model name: a C identifier.
    pub name: String,
    /// The entry computation.
    pub entry: Computation,
}
