//! The [`Model`] every front end returns: the verified HLO module, where it came from, and its
//! buckets.
//!
//! Contract: `module` passes the verifier; its entry parameters are the model's inputs and its
//! outputs the model's outputs, in the order of the source (spec `inputs`/`outputs`, ONNX graph
//! inputs/outputs, HLO entry parameters / root tuple). `buckets` and `seq` are filled only by a
//! spec with `batch_sizes` or `seq_buckets`; importers leave them empty.

use crate::ir::Module;
use std::path::PathBuf;

/// A loaded model: the HLO module and where it came from.
#[derive(Debug)]
pub struct Model {
    /// The verified module (entry parameters in spec input order, outputs in spec output order).
    pub module: Module,
    /// The spec file.
    pub spec_path: PathBuf,
    /// Weight file or directory, if any (build integration watches it).
    pub params_path: Option<PathBuf>,
    /// The ONNX or HLO text file a `graph:` spec imports (build integration watches it).
    pub graph_path: Option<PathBuf>,
    /// With `batch_sizes` or `seq_buckets`: the module of every bucket, smallest first (the one
    /// of `module`'s own size included); empty otherwise.
    pub buckets: Vec<(usize, Module)>,
    /// With `seq_buckets`: which inputs and outputs carry the sequence, and the mask.
    pub seq: Option<SeqAxis>,
}

impl Model {
    /// A model of one module without buckets (what importers return).
    pub fn single(
        module: Module,
        spec_path: PathBuf,
        params_path: Option<PathBuf>,
        graph_path: Option<PathBuf>,
    ) -> Model {
        Model {
            module,
            spec_path,
            params_path,
            graph_path,
            buckets: Vec::new(),
            seq: None,
        }
    }
}

/// Which inputs and outputs carry the sequence dimension, and the mask input (see
/// `front/spec/seq.rs` for how a spec declares them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqAxis {
    /// The sequence dimension of the listed inputs and outputs.
    pub axis: usize,
    /// The length the spec is written for.
    pub declared: usize,
    /// Parameter numbers of the listed inputs.
    pub inputs: Vec<usize>,
    /// Output numbers of the listed outputs.
    pub outputs: Vec<usize>,
    /// Parameter number of the mask input.
    pub mask: Option<usize>,
}
