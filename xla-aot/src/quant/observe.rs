//! Which values post-training quantization quantizes, and a module that returns them.
//!
//! Contract: [`sites`] lists, in instruction order and once each, the f32 entry values read as
//! the data operand (lhs) of a dot or convolution whose weight operand (rhs) is f32 and depends
//! on no parameter (a constant, or computed from constants only: a transposed or reshaped
//! weight), while the lhs depends on one. [`with_sites_as_outputs`] is the module with those values
//! appended to its outputs (named `quant.site.N`), for calibration runs.

use crate::ir::{DType, InstId, Module, Op, Output};

/// Whether each entry instruction depends on no parameter.
pub fn parameter_free(m: &Module) -> Vec<bool> {
    let c = &m.entry;
    let mut free = vec![false; c.instructions.len()];
    for (i, inst) in c.instructions.iter().enumerate() {
        free[i] = match inst.op {
            Op::Parameter { .. } => false,
            _ => inst.operands.iter().all(|o| free[o.index()]),
        };
    }
    free
}

/// The values quantized: data operands of products with constant weights.
pub fn sites(m: &Module) -> Vec<InstId> {
    let c = &m.entry;
    let free = parameter_free(m);
    let mut seen = vec![false; c.instructions.len()];
    let mut out = Vec::new();
    for inst in &c.instructions {
        if !matches!(inst.op, Op::Dot(_) | Op::Convolution { .. }) {
            continue;
        }
        let (lhs, rhs) = (inst.operands[0], inst.operands[1]);
        let f32s = c.inst(lhs).shape.dtype == DType::F32 && c.inst(rhs).shape.dtype == DType::F32;
        if f32s && free[rhs.index()] && !free[lhs.index()] && !seen[lhs.index()] {
            seen[lhs.index()] = true;
            out.push(lhs);
        }
    }
    out.sort();
    out
}

/// `m` with `sites` appended to its outputs.
pub fn with_sites_as_outputs(m: &Module, sites: &[InstId]) -> Module {
    let mut probe = m.clone();
    for (k, &s) in sites.iter().enumerate() {
        probe.entry.outputs.push(Output {
            name: format!("quant.site.{k}"),
            value: s,
        });
    }
    probe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_are_data_operands_of_weighted_products() {
        let text = "HloModule m\n\nENTRY %main {\n  \
             %x = f32[1,2]{1,0} parameter(0)\n  \
             %w = f32[2,2]{1,0} constant({1, 2, 3, 4})\n  \
             %wt = f32[2,2]{1,0} transpose(%w), dimensions={1,0}\n  \
             %y = f32[1,2]{1,0} dot(%x, %wt), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             %r = f32[1,2]{1,0} maximum(%y, %y)\n  \
             %z = f32[1,2]{1,0} dot(%r, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             %a = f32[1,1]{1,0} dot(%r, %z), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n  \
             ROOT %outputs = (f32[1,1]{1,0}) tuple(%a), names={a}\n}\n";
        let m = crate::ir::parse_module(text).unwrap();
        let names: Vec<&str> = sites(&m)
            .iter()
            .map(|&s| m.entry.inst(s).name.as_str())
            .collect();
        // `a` multiplies two activations: not a site.
        assert_eq!(names, ["x", "r"]);
        let p = with_sites_as_outputs(&m, &sites(&m));
        assert_eq!(p.entry.outputs.len(), 3);
        assert_eq!(p.entry.outputs[2].name, "quant.site.1");
    }
}
