//! Weight files: a `.safetensors` file or a directory of `.npy` files.
//!
//! Contract: [`WeightStore::open`] checks that the file or directory exists and that its index
//! (safetensors header, directory listing) is well formed; [`WeightStore::load`] reads one tensor
//! by name and checks its data. Errors are messages; the caller positions them in the spec. Only
//! tensors an op uses are ever decoded. An imported graph takes weights through [`Bindings`]: a
//! weight binds the graph input of its name (or of its C-identifier form), once.

use crate::ir::npy::read_npy;
use crate::ir::shape::checked_element_count;
use crate::ir::{DType, Literal, LiteralData, Shape};
use crate::util::c_name;
use crate::util::io::io_reason;
use crate::util::suggest::nearest;
use safetensors::SafeTensors;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// Where weights come from.
#[derive(Debug)]
enum Source {
    /// No `params` in the spec.
    Empty,
    /// A whole `.safetensors` file in memory (already validated by the safetensors crate).
    SafeTensors { bytes: Vec<u8> },
    /// A directory with one `<name>.npy` per tensor.
    NpyDir,
}

/// The weights a spec can refer to.
#[derive(Debug)]
pub struct WeightStore {
    path: PathBuf,
    source: Source,
    names: BTreeSet<String>,
}

fn st_dtype(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::F32 => DType::F32,
        S::I32 => DType::I32,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::I8 => DType::I8,
        S::U8 => DType::U8,
        S::BOOL => DType::Pred,
        _ => return None,
    })
}

impl WeightStore {
    /// A store with no weights.
    pub fn empty() -> WeightStore {
        WeightStore {
            path: PathBuf::new(),
            source: Source::Empty,
            names: BTreeSet::new(),
        }
    }

    /// Opens `path` (a `.safetensors` file or a directory of `.npy` files).
    pub fn open(path: &Path) -> Result<WeightStore, String> {
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("cannot read params `{}`: {}", path.display(), io_reason(&e)))?;
        if meta.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| {
                format!(
                    "cannot list params directory `{}`: {}",
                    path.display(),
                    io_reason(&e)
                )
            })?;
            let mut names = BTreeSet::new();
            for entry in entries.flatten() {
                let file_name = entry.file_name();
                let file_name = file_name.to_string_lossy();
                if let Some(stem) = file_name.strip_suffix(".npy") {
                    names.insert(stem.to_string());
                }
            }
            return Ok(WeightStore {
                path: path.to_path_buf(),
                source: Source::NpyDir,
                names,
            });
        }
        let bytes = crate::util::io::read_bounded(
            path,
            crate::limits::MAX_WEIGHT_FILE_BYTES,
            "MAX_WEIGHT_FILE_BYTES",
        )
        .map_err(|e| format!("cannot read params `{}`: {}", path.display(), io_reason(&e)))?;
        let names = {
            let st = SafeTensors::deserialize(&bytes).map_err(|e| {
                format!(
                    "params `{}` is not a valid .safetensors file ({e})",
                    path.display()
                )
            })?;
            st.names().into_iter().cloned().collect()
        };
        Ok(WeightStore {
            path: path.to_path_buf(),
            source: Source::SafeTensors { bytes },
            names,
        })
    }

    /// Whether a tensor of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The params path as given (empty when there are none).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads one tensor.
    pub fn load(&self, name: &str) -> Result<Literal, String> {
        match &self.source {
            Source::Empty => Err(format!("no params file holds `{name}`")),
            Source::SafeTensors { bytes } => {
                let st = SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
                let view = st.tensor(name).map_err(|e| e.to_string())?;
                let dtype = st_dtype(view.dtype()).ok_or_else(|| {
                    format!(
                        "weight `{name}` in `{}` has dtype {:?}, which xla-aot does not read; store it as F32",
                        self.path.display(),
                        view.dtype()
                    )
                })?;
                let dims = view.shape().to_vec();
                if checked_element_count(&dims).is_none() {
                    return Err(format!("weight `{name}` of shape {dims:?} is too large"));
                }
                let lit = Literal {
                    dtype,
                    dims,
                    data: LiteralData::Dense(view.data().to_vec().into()),
                };
                if !lit.is_well_formed() {
                    return Err(format!(
                        "weight `{name}` in `{}` has a data size that does not match its shape",
                        self.path.display()
                    ));
                }
                Ok(lit)
            }
            Source::NpyDir => {
                let file = self.path.join(format!("{name}.npy"));
                let bytes = crate::util::io::read_bounded(
                    &file,
                    crate::limits::MAX_WEIGHT_FILE_BYTES,
                    "MAX_WEIGHT_FILE_BYTES",
                )
                .map_err(|e| format!("cannot read `{}`: {}", file.display(), io_reason(&e)))?;
                read_npy(&bytes).map_err(|e| format!("weight file `{}`: {e}", file.display()))
            }
        }
    }
}

/// Weights bound to graph inputs by name, and which of them were used.
pub struct Bindings<'w> {
    weights: &'w WeightStore,
    used: HashSet<String>,
}

impl<'w> Bindings<'w> {
    /// Bindings from a weight store (possibly empty).
    pub fn new(weights: &'w WeightStore) -> Bindings<'w> {
        Bindings {
            weights,
            used: HashSet::new(),
        }
    }

    /// The weight bound to an input known by `names` (its graph name and its sanitised form),
    /// checked against the input's shape; `None` when no weight has one of those names. A weight
    /// also matches when its sanitised name does: XLA prints a JAX argument `fc1.weight` as
    /// `fc1_weight`, so `fc1.weight` in a safetensors file binds it.
    pub fn take(&mut self, names: &[&str], shape: &Shape) -> Option<Result<Literal, String>> {
        let name = names
            .iter()
            .find(|n| self.weights.contains(n))
            .map(|n| n.to_string())
            .or_else(|| {
                self.weights
                    .names()
                    .find(|w| names.contains(&c_name::identifier(w).as_str()))
                    .map(str::to_string)
            })?;
        if !self.used.insert(name.clone()) {
            return Some(Err(format!(
                "weight `{name}` would bind a second input (`{}`); rename one of the inputs",
                names[0]
            )));
        }
        Some(self.weights.load(&name).and_then(|lit| {
            if lit.dtype != shape.dtype || lit.dims != shape.dims {
                Err(format!(
                    "weight `{name}` is {}{:?} but the input it binds is {shape}",
                    lit.dtype, lit.dims
                ))
            } else {
                Ok(lit)
            }
        }))
    }

    /// The first weight that bound nothing, with the candidate names for a hint.
    pub fn unused<'a>(
        &self,
        inputs: impl Iterator<Item = &'a str>,
    ) -> Option<(String, Option<String>)> {
        let inputs: Vec<&str> = inputs.collect();
        self.weights
            .names()
            .find(|n| !self.used.contains(*n))
            .map(|n| {
                (
                    n.to_string(),
                    nearest(n, inputs.iter().copied()).map(str::to_string),
                )
            })
    }
}
