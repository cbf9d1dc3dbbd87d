//! Rebuilding a computation: the one way passes change HLO.
//!
//! Contract: a [`Rewriter`] walks the old computation in order; each old instruction is either
//! copied (operands remapped), replaced by an already-built value, or replaced by new instructions
//! appended at that point. Because the old order is topological and new instructions only use values
//! built before them, the result is topological too. Names stay unique (a clash gets `.N`).

use crate::ir::{Computation, InstId, Instruction, Literal, Op, Output, Shape};
use std::collections::HashSet;

/// Builds a new instruction list from an old computation.
pub struct Rewriter<'a> {
    /// The computation being rewritten.
    pub old: &'a Computation,
    out: Vec<Instruction>,
    map: Vec<Option<InstId>>,
    names: HashSet<String>,
}

impl<'a> Rewriter<'a> {
    /// Starts rewriting `old`.
    pub fn new(old: &'a Computation) -> Rewriter<'a> {
        Rewriter {
            old,
            out: Vec::with_capacity(old.instructions.len()),
            map: vec![None; old.instructions.len()],
            names: HashSet::new(),
        }
    }

    /// The new id of an old value (it must have been copied or replaced already).
    pub fn get(&self, old: InstId) -> InstId {
        self.map[old.index()].expect("operands are rewritten before their users")
    }

    /// The new instruction with id `new`.
    pub fn new_inst(&self, new: InstId) -> &Instruction {
        &self.out[new.index()]
    }

    /// Appends an instruction (operands are new ids); returns its id.
    pub fn push(&mut self, mut inst: Instruction) -> InstId {
        let base = inst.name.clone();
        let mut n = 1;
        while self.names.contains(&inst.name) {
            inst.name = format!("{base}.{n}");
            n += 1;
        }
        self.names.insert(inst.name.clone());
        self.out.push(inst);
        InstId((self.out.len() - 1) as u32)
    }

    /// Appends a constant.
    pub fn constant(&mut self, name: &str, lit: Literal) -> InstId {
        let shape = Shape::new(lit.dtype, lit.dims.clone());
        self.push(Instruction {
            name: name.to_string(),
            op: Op::Constant(lit),
            operands: Vec::new(),
            shape,
        })
    }

    /// Copies old instruction `old` with remapped operands and records it.
    pub fn copy(&mut self, old: InstId) -> InstId {
        let mut inst = self.old.inst(old).clone();
        inst.operands = inst.operands.iter().map(|&o| self.get(o)).collect();
        let id = self.push(inst);
        self.map[old.index()] = Some(id);
        id
    }

    /// Records that old value `old` is now new value `new`.
    pub fn replace(&mut self, old: InstId, new: InstId) {
        self.map[old.index()] = Some(new);
    }

    /// Finishes with the old outputs remapped.
    pub fn finish(self) -> Computation {
        let outputs = self
            .old
            .outputs
            .iter()
            .map(|o| Output {
                name: o.name.clone(),
                value: self.map[o.value.index()].expect("outputs are rewritten"),
            })
            .collect();
        Computation {
            name: self.old.name.clone(),
            instructions: self.out,
            outputs,
        }
    }
}

/// The usual pass loop: walks the entry computation in order, hands `visit` each old instruction
/// with its operands already remapped to new ids (`visit` copies or replaces it through the
/// rewriter and says whether it changed anything), and installs the rebuilt computation if
/// anything changed.
pub fn rebuild(
    m: &mut crate::ir::Module,
    mut visit: impl FnMut(&mut Rewriter, InstId, &Instruction, Vec<InstId>) -> bool,
) -> bool {
    let c = &m.entry;
    let mut rw = Rewriter::new(c);
    let mut changed = false;
    for (i, inst) in c.instructions.iter().enumerate() {
        let operands = inst.operands.iter().map(|&o| rw.get(o)).collect();
        changed |= visit(&mut rw, InstId(i as u32), inst, operands);
    }
    if changed {
        m.entry = rw.finish();
    }
    changed
}

/// Users of every instruction (ids of instructions that read it, with repeats), plus a count of
/// output uses.
pub fn users(c: &Computation) -> (Vec<Vec<InstId>>, Vec<usize>) {
    let mut users = vec![Vec::new(); c.instructions.len()];
    for (i, inst) in c.instructions.iter().enumerate() {
        for &o in &inst.operands {
            users[o.index()].push(InstId(i as u32));
        }
    }
    let mut outs = vec![0; c.instructions.len()];
    for o in &c.outputs {
        outs[o.value.index()] += 1;
    }
    (users, outs)
}
