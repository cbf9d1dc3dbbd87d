//! Scheduling: a topological order of the entry computation chosen to lower peak memory.
//!
//! Contract: the pass list-schedules the instructions greedily: among the instructions whose
//! operands are computed, it runs the one that frees the most arena bytes net (operands it is the
//! last reader of, minus its own result; ties keep the original order). It keeps the new order
//! only when the buffer plan's lower bound (the most bytes live at one step) strictly drops, so
//! running it again changes nothing.

use super::Pass;
use crate::arena::plan;
use crate::ir::{Computation, InstId, Module, Op, Output};
use std::collections::BTreeSet;

/// The scheduling pass.
pub struct Schedule;

/// `c` with its instructions in `order` (a topological order of all of them).
pub fn reorder(c: &Computation, order: &[usize]) -> Computation {
    let mut new_id = vec![0u32; order.len()];
    for (k, &i) in order.iter().enumerate() {
        new_id[i] = k as u32;
    }
    let instructions = order
        .iter()
        .map(|&i| {
            let mut inst = c.instructions[i].clone();
            inst.operands = inst
                .operands
                .iter()
                .map(|o| InstId(new_id[o.index()]))
                .collect();
            inst
        })
        .collect();
    Computation {
        name: c.name.clone(),
        instructions,
        outputs: c
            .outputs
            .iter()
            .map(|o| Output {
                name: o.name.clone(),
                value: InstId(new_id[o.value.index()]),
            })
            .collect(),
    }
}

/// The greedy memory-aware order.
fn greedy_order(c: &Computation) -> Vec<usize> {
    let n = c.instructions.len();
    // One pass over the outputs (a scan per instruction was quadratic: 5,000 outputs).
    let mut is_output = vec![false; n];
    for o in &c.outputs {
        is_output[o.value.index()] = true;
    }
    let arena_bytes = |i: usize| -> i64 {
        let inst = &c.instructions[i];
        match inst.op {
            Op::Parameter { .. } | Op::Constant(_) | Op::Reshape => 0,
            _ if is_output[i] => 0,
            _ => inst.shape.size_bytes() as i64,
        }
    };
    let mut users: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for (i, inst) in c.instructions.iter().enumerate() {
        for o in &inst.operands {
            users[o.index()].insert(i);
        }
    }
    let mut pending: Vec<usize> = users.iter().map(|u| u.len()).collect();
    let mut missing: Vec<usize> = c
        .instructions
        .iter()
        .map(|i| i.operands.iter().collect::<BTreeSet<_>>().len())
        .collect();
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| missing[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while !ready.is_empty() {
        let pick = *ready
            .iter()
            .max_by_key(|&&i| {
                let operands: BTreeSet<usize> = c.instructions[i]
                    .operands
                    .iter()
                    .map(|o| o.index())
                    .collect();
                let freed: i64 = operands
                    .iter()
                    .filter(|&&o| pending[o] == 1)
                    .map(|&o| arena_bytes(o))
                    .sum();
                // Inputs and constants first (they cost nothing), then the best net saving; the
                // earliest instruction wins ties, so the order is deterministic.
                let free_start =
                    matches!(c.instructions[i].op, Op::Parameter { .. } | Op::Constant(_));
                (free_start, freed - arena_bytes(i), std::cmp::Reverse(i))
            })
            .expect("ready is not empty");
        ready.remove(&pick);
        order.push(pick);
        for o in c.instructions[pick]
            .operands
            .iter()
            .map(|o| o.index())
            .collect::<BTreeSet<_>>()
        {
            pending[o] -= 1;
        }
        for &u in &users[pick] {
            missing[u] -= 1;
            if missing[u] == 0 {
                ready.insert(u);
            }
        }
    }
    order
}

impl Pass for Schedule {
    fn name(&self) -> &'static str {
        "schedule"
    }

    fn run(&self, m: &mut Module) -> bool {
        let order = greedy_order(&m.entry);
        if order.iter().enumerate().all(|(k, &i)| k == i) {
            return false;
        }
        let candidate = Module {
            name: m.name.clone(),
            entry: reorder(&m.entry, &order),
            api: m.api.clone(),
            precision: m.precision,
        };
        if plan(&candidate).lower_bound < plan(m).lower_bound {
            *m = candidate;
            true
        } else {
            false
        }
    }
}
