//! Common subexpression elimination: two instructions with the same op, attributes, operands and
//! shape compute the same value; the later one is replaced by the earlier.
//!
//! Constants are equal when their literals are bitwise equal (so `-0.0` and `0.0` stay apart).
//! Parameters are never merged.

use super::Pass;
use super::rewrite::Rewriter;
use crate::ir::{InstId, Module, Op, Shape};
use std::collections::HashMap;

/// The CSE pass.
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, m: &mut Module) -> bool {
        let c = &m.entry;
        let mut rw = Rewriter::new(c);
        let mut seen: HashMap<(Op, Vec<InstId>, Shape), InstId> = HashMap::new();
        let mut changed = false;
        for (i, inst) in c.instructions.iter().enumerate() {
            let old = InstId(i as u32);
            if matches!(inst.op, Op::Parameter { .. }) {
                rw.copy(old);
                continue;
            }
            let operands: Vec<InstId> = inst.operands.iter().map(|&o| rw.get(o)).collect();
            let key = (inst.op.clone(), operands, inst.shape.clone());
            match seen.get(&key) {
                Some(&prev) => {
                    rw.replace(old, prev);
                    changed = true;
                }
                None => {
                    let id = rw.copy(old);
                    seen.insert(key, id);
                }
            }
        }
        if changed {
            m.entry = rw.finish();
        }
        changed
    }
}
