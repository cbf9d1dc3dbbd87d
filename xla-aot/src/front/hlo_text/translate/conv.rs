//! `convolution`: XLA's general convolution, mapped onto the IR's 2-D NCHW convolution.
//!
//! Contract: `dim_labels` are read per logical dim and the operands transposed into NCHW/OIHW
//! (and the result back); windows with dilation, padding and feature groups are kept; anything
//! the IR cannot express is an error naming the attribute.

use super::super::syntax::RawInst;
use super::attrs::*;
use super::{TResult, Tr, err_at};
use crate::ir::{InstId, Op, Window};

impl<'m, 'b, 'w> Tr<'m, 'b, 'w> {
    /// Any `dim_labels` layout: the operands are transposed into `bf01_oi01`, the result back.
    pub(super) fn convolution(&mut self, inst: &RawInst, x: InstId, k: InstId) -> TResult<InstId> {
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
