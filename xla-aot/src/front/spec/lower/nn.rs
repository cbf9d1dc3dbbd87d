//! Neural-network spec ops: conv2d, dense, matmul, pooling, and the composites built by the
//! shared `front::decompose` (batch_norm, gelu, softmax / log_softmax, layer_norm).
//!
//! Contract: each function checks its op's shapes and attributes against `docs/spec.md` and
//! appends the primitives; composites go through [`Composite`], which names their parts
//! `<op>.<part>` so that the spec's HLO reads as before.

use super::attrs::describe;
use super::tensors::numpy_broadcast;
use super::{Lowerer, OpDecl, R};
use crate::front::decompose::{self, CountOrder, Emitter, GeluForm};
use crate::front::diag::SpecError;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, Builder, DotDims, InstId, Op, ReduceKind, Window};

/// Op `d` as the [`Emitter`] of a shared decomposition: its parts are named `<op>.<part>`, its
/// result `<op>`, and builder failures are shape errors of the op.
struct Composite<'l, 'a> {
    lw: &'l mut Lowerer<'a>,
    d: &'l OpDecl,
}

impl Emitter for Composite<'_, '_> {
    type Error = SpecError;

    fn builder(&mut self) -> &mut Builder {
        &mut self.lw.b
    }

    fn name(&self, part: &str) -> String {
        if part.is_empty() {
            self.d.name.clone()
        } else {
            format!("{}.{part}", self.d.name)
        }
    }

    fn shape_error(&self, message: String) -> SpecError {
        self.lw.shape_err(self.d, message)
    }
}

impl<'a> Lowerer<'a> {
    fn composite<'l>(&'l mut self, d: &'l OpDecl) -> Composite<'l, 'a> {
        Composite { lw: self, d }
    }

    pub(super) fn conv2d(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let (x, w) = (ins[0], ins[1]);
        self.expect_rank(d, 0, x, &[4], "input [N, C, H, W]")?;
        self.expect_rank(d, 1, w, &[4], "weight [O, C/groups, kH, kW]")?;
        let (xd, wd) = (self.dims(x), self.dims(w));
        let strides = self
            .attr_sizes(d, "strides", &[2], true)?
            .unwrap_or(vec![1, 1]);
        let dil = self
            .attr_sizes(d, "dilations", &[2], true)?
            .unwrap_or(vec![1, 1]);
        let groups = self.attr_int(d, "groups")?.unwrap_or(1);
        if groups < 1 {
            return Err(self.attr_err(
                d,
                "groups",
                format!("expected a positive integer, found {groups}"),
            ));
        }
        let groups = groups as usize;
        let c = xd[1];
        if c % groups != 0 || wd[0] % groups != 0 {
            return Err(self.attr_err(d, "groups", format!(
                "groups = {groups} must divide the input channels ({c}) and the output channels ({})",
                wd[0]
            )));
        }
        let want = [wd[0], c / groups, wd[2], wd[3]];
        self.expect_dims(
            d,
            1,
            w,
            &want,
            &format!("weight (input has {c} channels, groups = {groups})"),
        )?;
        let [top, left, bottom, right] = self.padding2d(d)?;
        let window = Window {
            size: vec![wd[2], wd[3]],
            stride: strides,
            pad_low: vec![top, left],
            pad_high: vec![bottom, right],
            dilation: dil,
        };
        for i in 0..2 {
            if window.output_extent(i, xd[2 + i]).is_none() {
                return Err(self.shape_err(
                    d,
                    format!(
                        "the {}x{} kernel (dilation {:?}) does not fit the padded {}x{} input",
                        wd[2],
                        wd[3],
                        window.dilation,
                        xd[2] + top + bottom,
                        xd[3] + left + right
                    ),
                ));
            }
        }
        let name = &d.name;
        let has_bias = ins.len() == 3;
        let (x, w, x_scale) = self.integer_operands(d, x, w)?;
        let conv_name = if has_bias || x_scale.is_some() {
            format!("{name}.conv")
        } else {
            name.clone()
        };
        let conv = self.add(
            d,
            &conv_name,
            Op::Convolution {
                window,
                feature_group_count: groups,
            },
            &[x, w],
        )?;
        let conv = self.rescale(d, conv, x_scale, 1, has_bias)?;
        if !has_bias {
            return Ok(conv);
        }
        self.expect_dims(d, 2, ins[2], &[wd[0]], "bias")?;
        let od = self.dims(conv);
        let bias = self.bcast(d, &format!("{name}.bias"), ins[2], vec![1], od)?;
        self.binary(d, name, BinaryOp::Add, conv, bias)
    }

    pub(super) fn batch_norm(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let x = ins[0];
        let xd = self.dims(x);
        if xd.len() < 2 {
            return Err(self.shape_err(
                d,
                format!(
                    "input `{}` has shape {}; batch_norm needs [N, C, ...]",
                    d.inputs[0],
                    dims_str(&xd)
                ),
            ));
        }
        let c = xd[1];
        for (j, role) in [(1, "gamma"), (2, "beta"), (3, "mean"), (4, "var")] {
            self.expect_dims(
                d,
                j,
                ins[j],
                &[c],
                &format!("{role} (one per channel, C = {c})"),
            )?;
        }
        let eps = self.epsilon(d)?;
        let stats = [ins[1], ins[2], ins[3], ins[4]];
        decompose::batch_norm(&mut self.composite(d), x, stats, eps)
    }

    pub(super) fn dense(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let (x, w) = (ins[0], ins[1]);
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(self.shape_err(
                d,
                format!(
                    "input `{}` is a scalar; dense needs [..., in_features]",
                    d.inputs[0]
                ),
            ));
        }
        self.expect_rank(d, 1, w, &[2], "weight [out_features, in_features]")?;
        let wd = self.dims(w);
        let k = xd[xd.len() - 1];
        self.expect_dims(
            d,
            1,
            w,
            &[wd[0], k],
            &format!("weight [out_features, in_features] (the input's last dim is {k})"),
        )?;
        let name = &d.name;
        let has_bias = ins.len() == 3;
        let (x, w, x_scale) = self.integer_operands(d, x, w)?;
        let dot_name = if has_bias || x_scale.is_some() {
            format!("{name}.dot")
        } else {
            name.clone()
        };
        let dot = self.add(
            d,
            &dot_name,
            Op::Dot(DotDims {
                lhs_contracting: vec![xd.len() - 1],
                rhs_contracting: vec![1],
                ..DotDims::default()
            }),
            &[x, w],
        )?;
        let out_dim = xd.len() - 1;
        let dot = self.rescale(d, dot, x_scale, out_dim, has_bias)?;
        if !has_bias {
            return Ok(dot);
        }
        self.expect_dims(d, 2, ins[2], &[wd[0]], "bias [out_features]")?;
        let od = self.dims(dot);
        let bias = self.bcast(d, &format!("{name}.bias"), ins[2], vec![od.len() - 1], od)?;
        self.binary(d, name, BinaryOp::Add, dot, bias)
    }

    pub(super) fn matmul(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let (a, b) = (ins[0], ins[1]);
        self.expect_rank(d, 0, a, &[2, 3, 4, 5, 6], "input a")?;
        self.expect_rank(d, 1, b, &[2, 3, 4, 5, 6], "input b")?;
        let ta = self.attr_bool(d, "transpose_a")?.unwrap_or(false);
        let tb = self.attr_bool(d, "transpose_b")?.unwrap_or(false);
        let (ad, bd) = (self.dims(a), self.dims(b));
        let (ra, rb) = (ad.len(), bd.len());
        let (m, ka) = if ta {
            (ad[ra - 1], ad[ra - 2])
        } else {
            (ad[ra - 2], ad[ra - 1])
        };
        let (kb, n) = if tb {
            (bd[rb - 1], bd[rb - 2])
        } else {
            (bd[rb - 2], bd[rb - 1])
        };
        if ka != kb {
            return Err(self.shape_err(d, format!(
                "inner dimensions differ: `{}` {} gives [{m}, {ka}]{} and `{}` {} gives [{kb}, {n}]{}",
                d.inputs[0], dims_str(&ad), if ta { " after transpose_a" } else { "" },
                d.inputs[1], dims_str(&bd), if tb { " after transpose_b" } else { "" }
            )));
        }
        // Batch dims: numpy broadcasting of the leading dims.
        let (ba, bb) = (&ad[..ra - 2], &bd[..rb - 2]);
        let batch = numpy_broadcast(ba, bb).map_err(|(_, x, y)| {
            self.shape_err(
                d,
                format!(
                    "batch dimensions of `{}` {} and `{}` {} do not broadcast ({x} vs {y})",
                    d.inputs[0],
                    dims_str(&ad),
                    d.inputs[1],
                    dims_str(&bd)
                ),
            )
        })?;
        let nb = batch.len();
        let name = d.name.clone();
        let widen = |me: &mut Self, v: InstId, dv: &[usize], tag: &str| -> R<InstId> {
            let mut full = batch.clone();
            full.extend_from_slice(&dv[dv.len() - 2..]);
            if full == dv {
                return Ok(v);
            }
            let map: Vec<usize> = (nb + 2 - dv.len()..nb + 2).collect();
            me.bcast(d, &format!("{name}.{tag}"), v, map, full)
        };
        let a2 = widen(self, a, &ad, "a")?;
        let b2 = widen(self, b, &bd, "b")?;
        let batch_dims: Vec<usize> = (0..nb).collect();
        let dims = DotDims {
            lhs_batch: batch_dims.clone(),
            lhs_contracting: vec![if ta { nb } else { nb + 1 }],
            rhs_batch: batch_dims,
            rhs_contracting: vec![if tb { nb + 1 } else { nb }],
        };
        self.add(d, &name, Op::Dot(dims), &[a2, b2])
    }

    pub(super) fn gelu(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let approx = match d.attr("approximate") {
            None => "none".to_string(),
            Some(v) => v.as_str().map(str::to_string).ok_or_else(|| {
                self.attr_err(
                    d,
                    "approximate",
                    format!("expected `none` or `tanh`, found {}", describe(v)),
                )
            })?,
        };
        let Some(form) = GeluForm::from_approximate(&approx) else {
            return Err(self.attr_err(
                d,
                "approximate",
                format!("expected `none` or `tanh`, found `{approx}`"),
            ));
        };
        decompose::gelu(&mut self.composite(d), x, form)
    }

    pub(super) fn pool2d(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        self.expect_rank(d, 0, x, &[4], "input [N, C, H, W]")?;
        let xd = self.dims(x);
        let k = self.attr_sizes(d, "kernel_size", &[2], true)?;
        let k = self.required(d, "kernel_size", k)?;
        let s = self
            .attr_sizes(d, "strides", &[2], true)?
            .unwrap_or(k.clone());
        let [top, left, bottom, right] = self.padding2d(d)?;
        if top >= k[0] || bottom >= k[0] || left >= k[1] || right >= k[1] {
            return Err(self.attr_err(d, "padding", format!(
                "padding [{top}, {left}, {bottom}, {right}] must be smaller than the kernel {}x{} on each side, or some windows would see only padding",
                k[0], k[1]
            )));
        }
        let window = Window {
            size: vec![1, 1, k[0], k[1]],
            stride: vec![1, 1, s[0], s[1]],
            pad_low: vec![0, 0, top, left],
            pad_high: vec![0, 0, bottom, right],
            dilation: vec![1; 4],
        };
        for i in 2..4 {
            if window.output_extent(i, xd[i]).is_none() {
                return Err(self.shape_err(
                    d,
                    format!(
                        "the {}x{} window does not fit the padded {}x{} input",
                        k[0],
                        k[1],
                        xd[2] + top + bottom,
                        xd[3] + left + right
                    ),
                ));
            }
        }
        let name = d.name.clone();
        if d.kind == "max_pool2d" {
            return self.add(
                d,
                &name,
                Op::ReduceWindow {
                    kind: ReduceKind::Max,
                    window,
                },
                &[x],
            );
        }
        let include = self.attr_bool(d, "count_include_pad")?.unwrap_or(false);
        let sum = self.add(
            d,
            &format!("{name}.sum"),
            Op::ReduceWindow {
                kind: ReduceKind::Add,
                window: window.clone(),
            },
            &[x],
        )?;
        let od = self.dims(sum);
        let padded = top + left + bottom + right > 0;
        let count = if include || !padded {
            self.splat(d, &format!("{name}.count"), (k[0] * k[1]) as f32, &od)?
        } else {
            // Cells per window that are not padding: the same window summed over ones. A constant
            // subgraph, folded at compile time.
            let ones = self.splat(d, &format!("{name}.ones"), 1.0, &xd)?;
            self.add(
                d,
                &format!("{name}.count"),
                Op::ReduceWindow {
                    kind: ReduceKind::Add,
                    window,
                },
                &[ones],
            )?
        };
        self.binary(d, &name, BinaryOp::Divide, sum, count)
    }

    pub(super) fn softmax(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(self.shape_err(d, format!("{} needs a tensor of rank >= 1", d.kind)));
        }
        let axis = self.attr_int(d, "axis")?.unwrap_or(-1);
        let axis = self.axis(d, "axis", axis, xd.len())?;
        decompose::softmax(&mut self.composite(d), x, axis, d.kind == "log_softmax")
    }

    pub(super) fn layer_norm(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let x = ins[0];
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(self.shape_err(d, "layer_norm needs a tensor of rank >= 1".into()));
        }
        let axis = self.attr_int(d, "axis")?.unwrap_or(-1);
        let axis = self.axis(d, "axis", axis, xd.len())?;
        let eps = self.epsilon(d)?;
        let axes: Vec<usize> = (axis..xd.len()).collect();
        let normalized = &xd[axis..];
        for (j, role) in [(1usize, "gamma"), (2, "beta")] {
            if j < ins.len() {
                self.expect_dims(
                    d,
                    j,
                    ins[j],
                    normalized,
                    &format!("{role} (the normalised dims x.shape[{axis}:])"),
                )?;
            }
        }
        let name = d.name.clone();
        let (mut y, _) = {
            let last = ins.len() == 1;
            let mut g = self.composite(d);
            decompose::normalize(&mut g, x, &axes, eps, CountOrder::BeforeSum, last)?
        };
        let map: Vec<usize> = axes.clone();
        if ins.len() >= 2 {
            let g = self.bcast(
                d,
                &format!("{name}.gamma_b"),
                ins[1],
                map.clone(),
                xd.clone(),
            )?;
            let nm = if ins.len() == 2 {
                name.clone()
            } else {
                format!("{name}.scaled")
            };
            y = self.binary(d, &nm, BinaryOp::Multiply, y, g)?;
        }
        if ins.len() == 3 {
            let bb = self.bcast(d, &format!("{name}.beta_b"), ins[2], map, xd)?;
            y = self.binary(d, &name, BinaryOp::Add, y, bb)?;
        }
        Ok(y)
    }
}
