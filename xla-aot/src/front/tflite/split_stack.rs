//! SPLIT, SPLIT_V, PACK, UNPACK and GATHER of float models.
//!
//! Contract: axes, split sizes and (for a constant table) gathered indices are compile-time
//! constants where the op needs them. SPLIT and SPLIT_V slice in the held layout (`lower.rs`),
//! so their outputs keep it; PACK and UNPACK read TFLite order. GATHER (`batch_dims` 0) moves
//! the gathered axis first, takes rows with the IR's `gather` (int32 indices, a model input or a
//! constant; constant indices out of range are an error, as TFLite Micro's kernel makes them),
//! and moves the index dims back to the axis' place.

use super::lower::{Importer, R, Val};
use crate::front::tflite::read::pb;
use crate::ir::{InstId, Literal, Op};
use xla_aot_tflite_schema::tflite::{BuiltinOptionsRef as O, TensorType};

impl Importer<'_, '_> {
    /// `x` (held) split along TFLite axis `axis` into pieces of `sizes`, one per output.
    fn split_into(&mut self, x: &Val, axis: usize, sizes: &[usize]) -> R<()> {
        let dims = self.b.shape(x.id).dims.clone();
        let dim = x.perm.iter().position(|&p| p == axis).unwrap_or(axis);
        if sizes.iter().sum::<usize>() != dims[dim] || sizes.len() != self.op().outputs.len() {
            return Err(self.err(format!(
                "sizes {sizes:?} into {} outputs do not split an axis of {}",
                self.op().outputs.len(),
                dims[dim]
            )));
        }
        let mut start = 0;
        for (j, &n) in sizes.iter().enumerate() {
            let mut starts = vec![0; dims.len()];
            let mut limits = dims.clone();
            starts[dim] = start;
            limits[dim] = start + n;
            start += n;
            let y = self.unit_slice(&format!("part{j}"), x.id, starts, limits)?;
            let o = self.output_index(j)?;
            self.set(
                o,
                Val {
                    id: y,
                    perm: x.perm.clone(),
                },
            );
        }
        Ok(())
    }

    /// SPLIT: inputs `[axis, x]`, `num_splits` equal pieces.
    pub fn split(&mut self) -> R<()> {
        let (at, xt) = (self.need(0)?, self.need(1)?);
        let x = self.val(xt)?;
        let rank = x.perm.len();
        let a = *self
            .const_ints(at)?
            .first()
            .ok_or_else(|| self.err("the axis is empty"))?;
        let axis = self.axis(a, rank)?;
        let n = self.op().outputs.len();
        let extent = self.dims(&x)[axis];
        if n == 0 || extent % n != 0 {
            return Err(self.err(format!(
                "{n} outputs do not split an axis of {extent} evenly"
            )));
        }
        self.split_into(&x, axis, &vec![extent / n; n])
    }

    /// SPLIT_V: inputs `[x, size_splits, axis]`, one size may be −1.
    pub fn split_v(&mut self) -> R<()> {
        let (xt, st, at) = (self.need(0)?, self.need(1)?, self.need(2)?);
        let x = self.val(xt)?;
        let rank = x.perm.len();
        let a = *self
            .const_ints(at)?
            .first()
            .ok_or_else(|| self.err("the axis is empty"))?;
        let axis = self.axis(a, rank)?;
        let extent = self.dims(&x)[axis] as i64;
        let sizes = self.const_ints(st)?;
        let known: i64 = sizes.iter().filter(|&&s| s != -1).sum();
        let holes = sizes.iter().filter(|&&s| s == -1).count();
        if holes > 1 || sizes.iter().any(|&s| s < -1) || known > extent {
            return Err(self.err(format!(
                "size_splits {sizes:?} do not split an axis of {extent}"
            )));
        }
        let sizes: Vec<usize> = sizes
            .iter()
            .map(|&s| {
                if s == -1 {
                    (extent - known) as usize
                } else {
                    s as usize
                }
            })
            .collect();
        self.split_into(&x, axis, &sizes)
    }

    /// PACK: the inputs stacked along a new axis.
    pub fn pack(&mut self) -> R<()> {
        let axis = match &self.op().options {
            Some(O::PackOptions(o)) => o.axis().map_err(pb(self.path, "PackOptions"))?,
            _ => 0,
        };
        let n = self.op().inputs.len();
        let mut parts = Vec::new();
        let mut rank = 0;
        for j in 0..n {
            let t = self.need(j)?;
            let x = self.tflite(t)?;
            let mut d = self.b.shape(x).dims.clone();
            rank = d.len();
            let a = self.axis(axis.into(), rank + 1)?;
            d.insert(a, 1);
            let name = self.name(&format!("item{j}"));
            parts.push(self.b.reshape(&name, x, d).map_err(self.ir())?);
        }
        let a = self.axis(axis.into(), rank + 1)?;
        let name = self.name("");
        let y = self
            .b
            .add(&name, Op::Concatenate { dimension: a }, &parts)
            .map_err(self.ir())?;
        let o = self.output_index(0)?;
        self.set(o, Val::plain(y, rank + 1));
        Ok(())
    }

    /// UNPACK: one output per index of `axis`, the axis removed.
    pub fn unpack(&mut self) -> R<()> {
        let axis = match &self.op().options {
            Some(O::UnpackOptions(o)) => o.axis().map_err(pb(self.path, "UnpackOptions"))?,
            _ => 0,
        };
        let xt = self.need(0)?;
        let x = self.tflite(xt)?;
        let dims = self.b.shape(x).dims.clone();
        if dims.is_empty() {
            return Err(self.err("UNPACK of a scalar"));
        }
        let a = self.axis(axis.into(), dims.len())?;
        if dims[a] != self.op().outputs.len() {
            return Err(self.err(format!(
                "{} outputs for an axis of {}",
                self.op().outputs.len(),
                dims[a]
            )));
        }
        let mut rest = dims.clone();
        rest.remove(a);
        for j in 0..dims[a] {
            let mut starts = vec![0; dims.len()];
            let mut limits = dims.clone();
            starts[a] = j;
            limits[a] = j + 1;
            let s = self.unit_slice(&format!("item{j}"), x, starts, limits)?;
            let name = self.name(&format!("item{j}.squeezed"));
            let y = self.b.reshape(&name, s, rest.clone()).map_err(self.ir())?;
            let o = self.output_index(j)?;
            self.set(o, Val::plain(y, rest.len()));
        }
        Ok(())
    }

    /// GATHER along `axis` (`batch_dims` 0).
    pub fn gather(&mut self) -> R<()> {
        let (axis, batch_dims) = match &self.op().options {
            Some(O::GatherOptions(o)) => {
                let p = pb(self.path, "GatherOptions");
                (o.axis().map_err(&p)?, o.batch_dims().map_err(&p)?)
            }
            _ => (0, 0),
        };
        if batch_dims != 0 {
            return Err(self.err(format!("batch_dims {batch_dims}: only 0 is supported")));
        }
        let (pt, it) = (self.need(0)?, self.need(1)?);
        if !self.is_quantized(pt) {
            self.check_float(pt)?;
        }
        let table = self.tflite(pt)?;
        let td = self.b.shape(table).dims.clone();
        let a = self.axis(axis.into(), td.len())?;
        let indices = self.gather_indices(it, td[a])?;
        let id = self.b.shape(indices).dims.clone();
        // The gathered axis first.
        let mut front: Vec<usize> = vec![a];
        front.extend((0..td.len()).filter(|&i| i != a));
        let t = self.transposed(table, front, "table")?;
        let name = self.name("rows");
        let g = self
            .b
            .add(&name, Op::Gather, &[t, indices])
            .map_err(self.ir())?;
        // g: indices dims, then the table's dims before `a`, then after it.
        let (ni, nb) = (id.len(), a);
        let rank = ni + td.len() - 1;
        let mut perm: Vec<usize> = (ni..ni + nb).collect();
        perm.extend(0..ni);
        perm.extend(ni + nb..rank);
        let y = self.transposed(g, perm, "")?;
        let o = self.output_index(0)?;
        self.set(o, Val::plain(y, rank));
        Ok(())
    }

    /// Input `t` as int32 indices into an axis of `extent` (constants checked).
    fn gather_indices(&mut self, t: usize, extent: usize) -> R<InstId> {
        let tensor = self.tensor(t);
        if tensor.data.is_some() {
            let v = self.const_ints(t)?;
            if let Some(&bad) = v.iter().find(|&&i| i < 0 || i >= extent as i64) {
                return Err(self.err(format!(
                    "index {bad} of {} is outside the gathered axis of {extent}",
                    self.tensor_name(t)
                )));
            }
            let v: Vec<i32> = v.iter().map(|&i| i as i32).collect();
            let dims = tensor.shape.clone();
            return Ok(self
                .b
                .constant(&self.name("indices"), Literal::from_i32(dims, &v)));
        }
        if !matches!(tensor.dtype, TensorType::Int32 | TensorType::Int64) {
            return Err(self.err(format!("{} must hold int32 indices", self.tensor_name(t))));
        }
        self.tflite(t)
    }

    /// `x` transposed by `permutation` (itself when it is the identity).
    pub fn transposed(&mut self, x: InstId, permutation: Vec<usize>, part: &str) -> R<InstId> {
        if permutation.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        let name = self.name(part);
        self.b
            .add(&name, Op::Transpose { permutation }, &[x])
            .map_err(self.ir())
    }
}
