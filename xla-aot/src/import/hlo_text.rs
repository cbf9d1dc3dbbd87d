//! XLA HLO text → HLO module (stub).

use super::Bindings;
use crate::ir::Module;
use crate::spec::{SpecError, SpecErrorKind};
use std::path::Path;

/// Imports the text of an XLA HLO module.
pub fn import(
    path: &Path,
    _source: &str,
    _name: &str,
    _bindings: &mut Bindings,
) -> Result<Module, SpecError> {
    Err(SpecError::new(
        path,
        SpecErrorKind::Invalid("HLO text import is not implemented yet".into()),
    ))
}
