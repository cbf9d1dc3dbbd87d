//! ConvTranspose (1-D and 2-D) as a convolution of the stride-dilated input with the flipped,
//! transposed kernel.
//!
//! Contract: [`Importer::conv_transpose`] reads `strides`, `dilations`, `group`, `pads`,
//! `output_padding`, `output_shape` and `auto_pad` as ONNX defines them (output extent
//! `s·(in − 1) + output_padding + (k − 1)·d + 1 − pad_begin − pad_end`). The input is dilated by
//! the strides (each element followed by `s − 1` zeros, built by a pad of a unit axis and a
//! reshape), the weight `[C_in, C_out/g, k...]` becomes `[C_out, C_in/g, k...]` with its spatial
//! axes reversed (a constant weight folds at compile time), and a stride-1 convolution with
//! padding `d·(k − 1) − pad` computes the result; a negative padding crops the output instead.
//! The convolution then takes the compiler's convolution paths. The dilated input costs `s²` the
//! multiply-adds of a direct transposed convolution (a note for the performance work).

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::shape::dims_str;
use crate::ir::{InstId, Op, Window};

impl Importer {
    fn int_attr_list(&self, cx: &Ctx, name: &str, n: usize, default: i64) -> R<Vec<i64>> {
        match cx.attr_ints(name)? {
            None => Ok(vec![default; n]),
            Some(v) if v.len() == n => Ok(v),
            Some(v) => Err(cx.attr_err(name, format!("{v:?} must have {n} entries"))),
        }
    }

    /// `x` with `s − 1` zeros after every element along spatial axis `axis` (the last of them
    /// dropped).
    fn dilate(&mut self, cx: &Ctx, x: InstId, axis: usize, s: usize) -> R<InstId> {
        if s == 1 {
            return Ok(x);
        }
        let xd = self.dims(x);
        let n = xd[axis];
        let mut unit = xd.clone();
        unit.insert(axis + 1, 1);
        let u = self.reshape(cx, x, unit.clone())?;
        let zero = self.b.scalar("constant", 0.0);
        let mut high = vec![0; unit.len()];
        high[axis + 1] = s - 1;
        let p = self.add(
            cx,
            Op::Pad {
                low: vec![0; unit.len()],
                high,
            },
            &[u, zero],
        )?;
        let mut merged = xd.clone();
        merged[axis] = n * s;
        let m = self.reshape(cx, p, merged.clone())?;
        let mut limits = merged;
        limits[axis] = (n - 1) * s + 1;
        self.crop(cx, m, vec![0; limits.len()], limits)
    }

    /// `ConvTranspose(X, W[, B])`.
    pub fn conv_transpose(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let mut x = self.rt_f32(cx, 0)?;
        let mut w = self.rt_f32(cx, 1)?;
        let (xd0, wd0) = (self.dims(x), self.dims(w));
        if xd0.len() != wd0.len() || !(3..=4).contains(&xd0.len()) {
            return Err(cx.err(format!(
                "input {} and weight {} must both be rank 3 (1-D) or 4 (2-D)",
                dims_str(&xd0),
                dims_str(&wd0)
            )));
        }
        let n = xd0.len() - 2;
        let group = cx.attr_i_or("group", 1)?;
        let (c_in, c_out_g) = (wd0[0], wd0[1]);
        if group < 1 || xd0[1] != c_in || c_in % group as usize != 0 {
            return Err(cx.err(format!(
                "weight {} must be [C_in, C_out/group, k...] with C_in = {} (the input's channels) divisible by group {group}",
                dims_str(&wd0),
                xd0[1]
            )));
        }
        let g = group as usize;
        let stride: Vec<usize> = self
            .int_attr_list(cx, "strides", n, 1)?
            .iter()
            .map(|&v| v.max(1) as usize)
            .collect();
        let dil: Vec<usize> = self
            .int_attr_list(cx, "dilations", n, 1)?
            .iter()
            .map(|&v| v.max(1) as usize)
            .collect();
        let out_pad = self.int_attr_list(cx, "output_padding", n, 0)?;
        let k: Vec<usize> = wd0[2..].to_vec();
        let input: Vec<usize> = xd0[2..].to_vec();
        // The full extent before padding is removed, per spatial dim.
        let full: Vec<i64> = (0..n)
            .map(|i| {
                (stride[i] * (input[i] - 1)) as i64 + out_pad[i] + ((k[i] - 1) * dil[i] + 1) as i64
            })
            .collect();
        let auto = cx.attr_s("auto_pad")?.unwrap_or_else(|| "NOTSET".into());
        let output_shape = cx.attr_ints("output_shape")?;
        let (begin, end): (Vec<i64>, Vec<i64>) = if let Some(os) = output_shape.as_ref() {
            let os = if os.len() == n + 2 {
                os[2..].to_vec()
            } else {
                os.clone()
            };
            if os.len() != n {
                return Err(cx.attr_err(
                    "output_shape",
                    format!("{os:?} must have {n} spatial entries"),
                ));
            }
            let total: Vec<i64> = (0..n).map(|i| full[i] - os[i]).collect();
            let upper = auto != "SAME_LOWER";
            (0..n)
                .map(|i| {
                    let (small, large) = (total[i] / 2, total[i] - total[i] / 2);
                    if upper {
                        (small, large)
                    } else {
                        (large, small)
                    }
                })
                .unzip()
        } else {
            match auto.as_str() {
                "NOTSET" | "" | "VALID" => {
                    let pads = self.int_attr_list(cx, "pads", 2 * n, 0)?;
                    if auto == "VALID" {
                        (vec![0; n], vec![0; n])
                    } else {
                        (pads[..n].to_vec(), pads[n..].to_vec())
                    }
                }
                "SAME_UPPER" | "SAME_LOWER" => (0..n)
                    .map(|i| {
                        let total = full[i] - (input[i] * stride[i]) as i64;
                        let (small, large) = (total / 2, total - total / 2);
                        if auto == "SAME_UPPER" {
                            (small, large)
                        } else {
                            (large, small)
                        }
                    })
                    .unzip(),
                o => return Err(cx.attr_err("auto_pad", format!("`{o}` is not an ONNX auto_pad"))),
            }
        };
        // 1-D as 2-D with a unit height.
        let one_d = n == 1;
        let (stride, dil, k, begin, end, out_pad) = if one_d {
            let mut xd = xd0.clone();
            xd.insert(2, 1);
            x = self.reshape(cx, x, xd)?;
            let mut wd = wd0.clone();
            wd.insert(2, 1);
            w = self.reshape(cx, w, wd)?;
            (
                vec![1, stride[0]],
                vec![1, dil[0]],
                vec![1, k[0]],
                vec![0, begin[0]],
                vec![0, end[0]],
                vec![0, out_pad[0]],
            )
        } else {
            (stride, dil, k, begin, end, out_pad)
        };
        for (i, &s) in stride.iter().enumerate() {
            x = self.dilate(cx, x, 2 + i, s)?;
        }
        // W [C_in, C_out/g, kh, kw] → [C_out, C_in/g, kh, kw], spatially reversed.
        let (kh, kw) = (k[0], k[1]);
        let w5 = self.reshape(cx, w, vec![g, c_in / g, c_out_g, kh, kw])?;
        let wt = self.add(
            cx,
            Op::Transpose {
                permutation: vec![0, 2, 1, 3, 4],
            },
            &[w5],
        )?;
        let mut wk = self.reshape(cx, wt, vec![g * c_out_g, c_in / g, kh, kw])?;
        for (axis, len) in [(2, kh), (3, kw)] {
            if len > 1 {
                let rev: Vec<usize> = (0..len).rev().collect();
                wk = self.take(cx, wk, axis, &rev, vec![len])?;
            }
        }
        // Padding of the equivalent convolution; negative amounts crop its output.
        let lo: Vec<i64> = (0..2)
            .map(|i| (dil[i] * (k[i] - 1)) as i64 - begin[i])
            .collect();
        let hi: Vec<i64> = (0..2)
            .map(|i| (dil[i] * (k[i] - 1)) as i64 - end[i] + out_pad[i])
            .collect();
        let window = Window {
            size: k.clone(),
            stride: vec![1, 1],
            pad_low: lo.iter().map(|&p| p.max(0) as usize).collect(),
            pad_high: hi.iter().map(|&p| p.max(0) as usize).collect(),
            dilation: dil.clone(),
        };
        let xd = self.dims(x);
        for i in 0..2 {
            if window.output_extent(i, xd[2 + i]).is_none() {
                return Err(cx.err("the pads leave no output"));
            }
        }
        let mut y = self.add(
            cx,
            Op::Convolution {
                window,
                feature_group_count: g,
            },
            &[x, wk],
        )?;
        if lo.iter().chain(&hi).any(|&p| p < 0) {
            let yd = self.dims(y);
            let starts: Vec<usize> = (0..4)
                .map(|i| {
                    if i < 2 {
                        0
                    } else {
                        (-lo[i - 2]).max(0) as usize
                    }
                })
                .collect();
            let limits: Vec<usize> = (0..4)
                .map(|i| {
                    if i < 2 {
                        yd[i]
                    } else {
                        (yd[i] as i64 - (-hi[i - 2]).max(0)) as usize
                    }
                })
                .collect();
            if (2..4).any(|i| limits[i] <= starts[i]) {
                return Err(cx.err("the pads leave no output"));
            }
            y = self.crop(cx, y, starts, limits)?;
        }
        y = self.channel_bias(cx, y, g * c_out_g)?;
        if one_d {
            let mut od = self.dims(y);
            od.remove(2);
            y = self.reshape(cx, y, od)?;
        }
        Ok(rt(y, dt::FLOAT))
    }
}
