//! Attributes of spec ops: typed reads of the YAML values, with errors at the attribute's node.
//!
//! Contract: every `attr_*` returns `None` when the op does not give the attribute and an error
//! positioned at the attribute (`ops[i].<attr>`) when its value has the wrong type or range; axes
//! are normalised against the rank and padding has its 2-D forms expanded.

use super::{Lowerer, OpDecl, R};
use crate::front::decompose::DEFAULT_EPSILON;
use crate::front::diag::SpecErrorKind;
use serde_yaml::Value;

impl<'a> Lowerer<'a> {
    pub(super) fn int_of(&self, d: &OpDecl, attr: &str, v: &Value, what: &str) -> R<i64> {
        v.as_i64().ok_or_else(|| {
            self.attr_err(d, attr, format!("expected {what}, found {}", describe(v)))
        })
    }

    pub(super) fn attr_int(&self, d: &OpDecl, attr: &str) -> R<Option<i64>> {
        d.attr(attr)
            .map(|v| self.int_of(d, attr, v, "an integer"))
            .transpose()
    }

    /// A number, `.inf` or `-.inf` allowed, NaN not: no op of the spec has a meaning for a NaN
    /// attribute, and comparisons with one (clamp's bounds) make the compiled code and the
    /// interpreter disagree.
    pub(super) fn attr_float(&self, d: &OpDecl, attr: &str) -> R<Option<f64>> {
        let x = self.attr_float_any(d, attr)?;
        if x.is_some_and(f64::is_nan) {
            return Err(self
                .attr_err(d, attr, "expected a number, found `.nan`".into())
                .hint("NaN has no meaning here; give a number"));
        }
        Ok(x)
    }

    /// A finite number (an epsilon, a slope): NaN and infinities are errors.
    pub(super) fn attr_finite(&self, d: &OpDecl, attr: &str) -> R<Option<f64>> {
        let x = self.attr_float(d, attr)?;
        if let Some(v) = x.filter(|v| !v.is_finite()) {
            let found = if v > 0.0 { ".inf" } else { "-.inf" };
            return Err(self
                .attr_err(
                    d,
                    attr,
                    format!("expected a finite number, found `{found}`"),
                )
                .hint("give a finite number"));
        }
        Ok(x)
    }

    /// Any float, NaN and infinities included (a padding value).
    pub(super) fn attr_float_any(&self, d: &OpDecl, attr: &str) -> R<Option<f64>> {
        d.attr(attr)
            .map(|v| {
                v.as_f64()
                    .filter(|x| x.is_finite() || v.is_f64())
                    .ok_or_else(|| {
                        self.attr_err(d, attr, format!("expected a number, found {}", describe(v)))
                    })
            })
            .transpose()
    }

    pub(super) fn attr_bool(&self, d: &OpDecl, attr: &str) -> R<Option<bool>> {
        d.attr(attr)
            .map(|v| {
                v.as_bool().ok_or_else(|| {
                    self.attr_err(
                        d,
                        attr,
                        format!("expected true or false, found {}", describe(v)),
                    )
                })
            })
            .transpose()
    }

    pub(super) fn attr_ints(&self, d: &OpDecl, attr: &str) -> R<Option<Vec<i64>>> {
        let Some(v) = d.attr(attr) else {
            return Ok(None);
        };
        let Some(seq) = v.as_sequence() else {
            return Err(self.attr_err(
                d,
                attr,
                format!("expected a list of integers, found {}", describe(v)),
            ));
        };
        seq.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_i64().ok_or_else(|| {
                    self.err(
                        &format!("{}.{}[{}]", d.path(), attr, i),
                        SpecErrorKind::BadAttribute {
                            op: d.name.clone(),
                            attr: attr.to_string(),
                            detail: format!("expected an integer, found {}", describe(x)),
                        },
                    )
                })
            })
            .collect::<R<Vec<i64>>>()
            .map(Some)
    }

    /// A list of non-negative (or, with `positive`, strictly positive) integers of a given length.
    pub(super) fn attr_sizes(
        &self,
        d: &OpDecl,
        attr: &str,
        lens: &[usize],
        positive: bool,
    ) -> R<Option<Vec<usize>>> {
        let Some(v) = self.attr_ints(d, attr)? else {
            return Ok(None);
        };
        if !lens.contains(&v.len()) {
            let want: Vec<String> = lens.iter().map(|l| l.to_string()).collect();
            return Err(self.attr_err(
                d,
                attr,
                format!("expected {} value(s), found {}", want.join(" or "), v.len()),
            ));
        }
        let min = i64::from(positive);
        if let Some(bad) = v.iter().find(|&&x| x < min) {
            return Err(self.attr_err(d, attr, format!("expected values >= {min}, found {bad}")));
        }
        Ok(Some(v.into_iter().map(|x| x as usize).collect()))
    }

    pub(super) fn required<T>(&self, d: &OpDecl, attr: &str, v: Option<T>) -> R<T> {
        v.ok_or_else(|| {
            self.err_key(
                &d.path(),
                "op",
                SpecErrorKind::MissingAttribute {
                    op: d.name.clone(),
                    kind: d.kind.clone(),
                    attr: attr.to_string(),
                },
            )
        })
    }

    /// A possibly negative axis into `rank` dims.
    pub(super) fn axis(&self, d: &OpDecl, attr: &str, axis: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        if axis < -r || axis >= r {
            return Err(self.attr_err(
                d,
                attr,
                format!(
                    "axis {axis} is out of range for a tensor of rank {rank} (valid: {} to {})",
                    -r,
                    r - 1
                ),
            ));
        }
        Ok(if axis < 0 {
            (axis + r) as usize
        } else {
            axis as usize
        })
    }

    /// 2-D padding as (top, left, bottom, right).
    pub(super) fn padding2d(&self, d: &OpDecl) -> R<[usize; 4]> {
        Ok(match self.attr_sizes(d, "padding", &[1, 2, 4], false)? {
            None => [0; 4],
            Some(p) if p.len() == 1 => [p[0]; 4],
            Some(p) if p.len() == 2 => [p[0], p[1], p[0], p[1]],
            Some(p) => [p[0], p[1], p[2], p[3]],
        })
    }

    /// The `epsilon` attribute of a normalisation: a non-negative number, by default
    /// [`DEFAULT_EPSILON`].
    pub(super) fn epsilon(&self, d: &OpDecl) -> R<f32> {
        let eps = self
            .attr_finite(d, "epsilon")?
            .unwrap_or(f64::from(DEFAULT_EPSILON));
        if eps < 0.0 {
            return Err(self.attr_err(
                d,
                "epsilon",
                format!("expected a non-negative number, found {eps}"),
            ));
        }
        Ok(eps as f32)
    }
}

/// A short description of a YAML value for "found ..." messages.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("`{n}`"),
        Value::String(s) => format!("the string `{s}`"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}
