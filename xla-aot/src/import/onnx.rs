//! ONNX model → HLO module (stub).

use super::Bindings;
use crate::ir::Module;
use crate::spec::{SpecError, SpecErrorKind};
use std::path::Path;

/// Imports a serialised ONNX `ModelProto`.
pub fn import(
    path: &Path,
    _bytes: &[u8],
    _name: &str,
    _bindings: &mut Bindings,
) -> Result<Module, SpecError> {
    Err(SpecError::new(
        path,
        SpecErrorKind::Invalid("ONNX import is not implemented yet".into()),
    ))
}
