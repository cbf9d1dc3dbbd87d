//! Common subexpression elimination: two instructions with the same op, attributes, operands and
//! shape compute the same value; the later one is replaced by the earlier.
//!
//! Constants are equal when their literals are bitwise equal (so `-0.0` and `0.0` stay apart).
//! Parameters are never merged.

use super::Pass;
use super::rewrite::rebuild;
use crate::ir::{InstId, Module, Op, Shape};
use std::collections::HashMap;

/// The CSE pass.
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, m: &mut Module) -> bool {
        let mut seen: HashMap<(Op, Vec<InstId>, Shape), InstId> = HashMap::new();
        rebuild(m, |rw, old, inst, operands| {
            if matches!(inst.op, Op::Parameter { .. }) {
                rw.copy(old);
                return false;
            }
            let key = (inst.op.clone(), operands, inst.shape.clone());
            match seen.get(&key) {
                Some(&prev) => {
                    rw.replace(old, prev);
                    true
                }
                None => {
                    let id = rw.copy(old);
                    seen.insert(key, id);
                    false
                }
            }
        })
    }
}
