//! Dead code elimination: drops every instruction no output depends on.
//!
//! Parameters always stay: they are the model's signature, used or not.

use super::Pass;
use super::rewrite::Rewriter;
use crate::ir::{InstId, Module, Op};

/// The DCE pass.
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, m: &mut Module) -> bool {
        let c = &m.entry;
        let mut live = vec![false; c.instructions.len()];
        for o in &c.outputs {
            live[o.value.index()] = true;
        }
        for i in (0..c.instructions.len()).rev() {
            let inst = &c.instructions[i];
            if matches!(inst.op, Op::Parameter { .. }) {
                live[i] = true;
            }
            if live[i] {
                for &o in &inst.operands {
                    live[o.index()] = true;
                }
            }
        }
        if live.iter().all(|&l| l) {
            return false;
        }
        let mut rw = Rewriter::new(c);
        for (i, _) in live.iter().enumerate().filter(|(_, l)| **l) {
            rw.copy(InstId(i as u32));
        }
        m.entry = rw.finish();
        true
    }
}
