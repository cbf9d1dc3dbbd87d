//! `Einsum` lowered to transposes, reshapes, `dot`s and sums.
//!
//! Contract: the equation is `term,term,...` with an optional `->output` (without it the output
//! is numpy's implicit form: the ellipsis dims, then the labels used once, sorted). A term is
//! letters with at most one `...` (ellipsis dims are aligned at the right and broadcast, numpy
//! style; an extent-1 dim against a larger one of the same label broadcasts too). A label repeated
//! within one term takes the diagonal (multiplied by an identity mask and summed). Operands are
//! contracted left to right: each pair becomes one batched matrix product `[B, M, K] × [B, K, N]`
//! after labels that no later operand or the output needs are summed away; the result is
//! transposed to the output's order. Float inputs only. Every error names the node.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::{CompareDir, DotDims, InstId, Op, ReduceKind};

/// A term's labels: letters as themselves, ellipsis dims as `ELLIPSIS_BASE + k` (k counted from
/// the right, so operands of different ellipsis rank line up).
type Label = u32;
const ELLIPSIS_BASE: Label = 1 << 16;

/// One side of the equation, parsed.
struct Term {
    letters: Vec<Label>,
    /// Index in `letters` where `...` stands, if it does.
    ellipsis: Option<usize>,
}

fn parse_term(s: &str) -> Result<Term, String> {
    let mut letters = Vec::new();
    let mut ellipsis = None;
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if ellipsis.is_some() {
                return Err(format!("term `{s}` has two ellipses"));
            }
            ellipsis = Some(letters.len());
            rest = r;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        if !c.is_ascii_alphabetic() {
            return Err(format!(
                "term `{s}` has `{c}`; labels are letters (and one `...`)"
            ));
        }
        letters.push(c as Label);
        rest = &rest[1..];
    }
    Ok(Term { letters, ellipsis })
}

impl Term {
    /// The labels of an operand of rank `rank`, ellipsis expanded; `None` if the rank does not fit.
    fn expand(&self, rank: usize) -> Option<Vec<Label>> {
        match self.ellipsis {
            None => (self.letters.len() == rank).then(|| self.letters.clone()),
            Some(at) => {
                let n = rank.checked_sub(self.letters.len())?;
                let mut out = self.letters[..at].to_vec();
                out.extend((0..n).rev().map(|k| ELLIPSIS_BASE + k as Label));
                out.extend_from_slice(&self.letters[at..]);
                Some(out)
            }
        }
    }
}

/// A run-time operand with one label per dim (no label twice).
struct Operand {
    id: InstId,
    labels: Vec<Label>,
}

impl Importer {
    pub fn einsum(&mut self, cx: &Ctx) -> R<Outs> {
        if cx.n_inputs() == 0 {
            return Err(cx.err("it takes at least one input"));
        }
        let Some(eq) = cx.attr_s("equation")? else {
            return Err(cx.attr_err("equation", "is required"));
        };
        let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        let bad = |m: String| cx.attr_err("equation", format!("`{eq}`: {m}"));
        let (lhs, out_term) = match eq.split_once("->") {
            Some((l, o)) => (l, Some(parse_term(o).map_err(&bad)?)),
            None => (eq.as_str(), None),
        };
        let terms: Vec<Term> = lhs
            .split(',')
            .map(parse_term)
            .collect::<Result<_, _>>()
            .map_err(&bad)?;
        if terms.len() != cx.n_inputs() {
            return Err(bad(format!(
                "it has {} input terms for {} inputs",
                terms.len(),
                cx.n_inputs()
            )));
        }

        // Operands with their labels; the extent of each label.
        let mut ops = Vec::new();
        let mut extent: Vec<(Label, usize)> = Vec::new();
        let mut max_ellipsis = 0usize;
        for (j, t) in terms.iter().enumerate() {
            let x = self.rt_f32(cx, j)?;
            let xd = self.dims(x);
            if xd.contains(&0) {
                return Err(cx.err(format!(
                    "input {j} {xd:?} is empty; the compiler does not support empty tensors here"
                )));
            }
            let Some(labels) = t.expand(xd.len()) else {
                return Err(bad(format!(
                    "term {j} has {} labels, input {j} has rank {}",
                    t.letters.len(),
                    xd.len()
                )));
            };
            if t.ellipsis.is_some() {
                max_ellipsis = max_ellipsis.max(xd.len() - t.letters.len());
            }
            for (&l, &e) in labels.iter().zip(&xd) {
                match extent.iter_mut().find(|(k, _)| *k == l) {
                    None => extent.push((l, e)),
                    Some((_, have)) if *have == e || e == 1 => {}
                    Some((_, have)) if *have == 1 => *have = e,
                    Some((_, have)) => {
                        return Err(bad(format!(
                            "label `{}` has extent {have} in one place and {e} in another",
                            show(l)
                        )));
                    }
                }
            }
            let op = self.diagonals(cx, x, labels)?;
            ops.push(op);
        }
        let size = |l: Label| extent.iter().find(|(k, _)| *k == l).map_or(1, |(_, e)| *e);

        // Extent-1 dims that broadcast against a larger extent of the same label are dropped.
        for op in &mut ops {
            let keep: Vec<bool> = op
                .labels
                .iter()
                .zip(self.dims(op.id))
                .map(|(&l, e)| e == size(l))
                .collect();
            if keep.iter().any(|k| !k) {
                let dims: Vec<usize> = self
                    .dims(op.id)
                    .into_iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|(e, _)| e)
                    .collect();
                op.id = self.reshape(cx, op.id, dims)?;
                op.labels = op
                    .labels
                    .iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|(l, _)| *l)
                    .collect();
            }
        }

        // The output labels.
        let out: Vec<Label> = match out_term {
            Some(t) => {
                // Without `...` in the output, the ellipsis dims are summed.
                let labels = t
                    .expand(
                        t.letters.len()
                            + if t.ellipsis.is_some() {
                                max_ellipsis
                            } else {
                                0
                            },
                    )
                    .unwrap_or_default();
                for (i, l) in labels.iter().enumerate() {
                    if labels[..i].contains(l) {
                        return Err(bad(format!("output label `{}` appears twice", show(*l))));
                    }
                    if *l < ELLIPSIS_BASE && !extent.iter().any(|(k, _)| k == l) {
                        return Err(bad(format!(
                            "output label `{}` is in no input term",
                            show(*l)
                        )));
                    }
                }
                labels
            }
            None => {
                let mut once: Vec<Label> = extent
                    .iter()
                    .map(|(l, _)| *l)
                    .filter(|&l| {
                        l < ELLIPSIS_BASE
                            && terms
                                .iter()
                                .map(|t| t.letters.iter().filter(|&&k| k == l).count())
                                .sum::<usize>()
                                == 1
                    })
                    .collect();
                once.sort();
                let mut labels: Vec<Label> = (0..max_ellipsis)
                    .rev()
                    .map(|k| ELLIPSIS_BASE + k as Label)
                    .collect();
                labels.extend(once);
                labels
            }
        };

        // Contract left to right.
        let mut acc = ops.remove(0);
        for k in 0..ops.len() {
            let later: Vec<Label> = ops[k + 1..]
                .iter()
                .flat_map(|o| o.labels.iter().copied())
                .chain(out.iter().copied())
                .collect();
            let rhs = Operand {
                id: ops[k].id,
                labels: ops[k].labels.clone(),
            };
            acc = self.contract(cx, acc, rhs, &later)?;
        }
        // Sum what the output does not keep, then put the rest in the output's order.
        let acc = self.sum_labels(cx, acc, &out)?;
        // Every output label is on `acc`: only labels nothing later needs were summed.
        let perm: Vec<usize> = out
            .iter()
            .filter_map(|l| acc.labels.iter().position(|k| k == l))
            .collect();
        let od: Vec<usize> = out.iter().map(|&l| size(l)).collect();
        let mut y = self.permute(cx, acc.id, &perm)?;
        y = self.reshape(cx, y, od)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// Takes the diagonal of every label repeated in one operand's term.
    fn diagonals(&mut self, cx: &Ctx, mut x: InstId, mut labels: Vec<Label>) -> R<Operand> {
        while let Some((i, j)) = (0..labels.len()).find_map(|j| {
            labels[..j]
                .iter()
                .position(|&l| l == labels[j])
                .map(|i| (i, j))
        }) {
            let xd = self.dims(x);
            if xd[i] != xd[j] {
                return Err(cx.err(format!(
                    "label `{}` repeats over dims of extents {} and {}; a diagonal needs equal extents",
                    show(labels[i]),
                    xd[i],
                    xd[j]
                )));
            }
            // x · (iota_i == iota_j), summed over j.
            let n = xd[i];
            let iota: Vec<f32> = (0..n).map(|v| v as f32).collect();
            let lit = crate::ir::Literal::from_f32(vec![n], &iota);
            let iota = self.b.constant("constant", lit);
            let ri = self.bcast(cx, iota, vec![i], xd.clone())?;
            let rj = self.bcast(cx, iota, vec![j], xd.clone())?;
            let eq = self.add(cx, Op::Compare(CompareDir::Eq), &[ri, rj])?;
            let zero = self.splat(cx, 0.0, &xd)?;
            let masked = self.select(cx, eq, x, zero)?;
            x = self.reduce_raw(cx, ReduceKind::Add, masked, &[j])?;
            labels.remove(j);
        }
        Ok(Operand { id: x, labels })
    }

    /// Sums the labels of `x` that `keep` does not list.
    fn sum_labels(&mut self, cx: &Ctx, x: Operand, keep: &[Label]) -> R<Operand> {
        let axes: Vec<usize> = (0..x.labels.len())
            .filter(|&i| !keep.contains(&x.labels[i]))
            .collect();
        if axes.is_empty() {
            return Ok(x);
        }
        let id = self.reduce_raw(cx, ReduceKind::Add, x.id, &axes)?;
        let labels = x
            .labels
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, l)| *l)
            .collect();
        Ok(Operand { id, labels })
    }

    /// `transpose` by `perm` (nothing when it is the identity).
    fn permute(&mut self, cx: &Ctx, x: InstId, perm: &[usize]) -> R<InstId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.add(
            cx,
            Op::Transpose {
                permutation: perm.to_vec(),
            },
            &[x],
        )
    }

    /// One pairwise contraction: labels in both operands are batch dims when `later` needs them
    /// and contracted otherwise; the result's labels are batch, lhs-only, rhs-only.
    fn contract(&mut self, cx: &Ctx, a: Operand, b: Operand, later: &[Label]) -> R<Operand> {
        let need_a: Vec<Label> = later.iter().chain(&b.labels).copied().collect();
        let need_b: Vec<Label> = later.iter().chain(&a.labels).copied().collect();
        let a = self.sum_labels(cx, a, &need_a)?;
        let b = self.sum_labels(cx, b, &need_b)?;
        let shared: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|l| b.labels.contains(l))
            .collect();
        let batch: Vec<Label> = shared
            .iter()
            .copied()
            .filter(|l| later.contains(l))
            .collect();
        let sum: Vec<Label> = shared
            .iter()
            .copied()
            .filter(|l| !later.contains(l))
            .collect();
        let free_a: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|l| !shared.contains(l))
            .collect();
        let free_b: Vec<Label> = b
            .labels
            .iter()
            .copied()
            .filter(|l| !shared.contains(l))
            .collect();
        let (ad, bd) = (self.dims(a.id), self.dims(b.id));
        let ext = |labels: &[Label], of: &[Label], d: &[usize]| -> Vec<usize> {
            labels
                .iter()
                .map(|l| d[of.iter().position(|k| k == l).unwrap_or(0)])
                .collect()
        };
        let pos = |labels: &[Label], of: &[Label]| -> Vec<usize> {
            labels
                .iter()
                .filter_map(|l| of.iter().position(|k| k == l))
                .collect()
        };
        let prod = |v: &[usize]| v.iter().product::<usize>();
        let bx = ext(&batch, &a.labels, &ad);
        let mx = ext(&free_a, &a.labels, &ad);
        let kx = ext(&sum, &a.labels, &ad);
        let nx = ext(&free_b, &b.labels, &bd);
        // a → [batch, free_a, sum] → [B, M, K]; b → [batch, sum, free_b] → [B, K, N].
        let pa: Vec<usize> = [
            pos(&batch, &a.labels),
            pos(&free_a, &a.labels),
            pos(&sum, &a.labels),
        ]
        .concat();
        let pb: Vec<usize> = [
            pos(&batch, &b.labels),
            pos(&sum, &b.labels),
            pos(&free_b, &b.labels),
        ]
        .concat();
        let at = self.permute(cx, a.id, &pa)?;
        let at = self.reshape(cx, at, vec![prod(&bx), prod(&mx), prod(&kx)])?;
        let bt = self.permute(cx, b.id, &pb)?;
        let bt = self.reshape(cx, bt, vec![prod(&bx), prod(&kx), prod(&nx)])?;
        let y = self.add(
            cx,
            Op::Dot(DotDims {
                lhs_batch: vec![0],
                lhs_contracting: vec![2],
                rhs_batch: vec![0],
                rhs_contracting: vec![1],
            }),
            &[at, bt],
        )?;
        let dims = [bx, mx, nx].concat();
        let y = self.reshape(cx, y, dims)?;
        Ok(Operand {
            id: y,
            labels: [batch, free_a, free_b].concat(),
        })
    }
}

fn show(l: Label) -> String {
    if l >= ELLIPSIS_BASE {
        "...".into()
    } else {
        char::from_u32(l).map_or_else(|| "?".into(), |c| c.to_string())
    }
}
