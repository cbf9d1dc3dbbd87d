//! XLA HLO text → HLO module: the importer for what `jax.jit(f).lower(...).as_text(dialect="hlo")`
//! prints and what TensorFlow / PyTorch-XLA write with `XLA_FLAGS=--xla_dump_to`.
//!
//! Contract: [`import`] parses the text (`syntax.rs`) and translates its ENTRY computation
//! (`translate/`) into a module called `name` whose inputs are the entry parameters in number
//! order (named without XLA's `.N` suffix) and whose outputs are the elements of the root tuple
//! (`out_0`, `out_1`, ...; a single non-tuple root is `out`). Errors point at the line and column
//! of the text. See `docs/import.md` for the supported opcodes.

pub mod syntax;
mod translate;

use crate::front::diag::{Pos, SpecError, SpecErrorKind};
use crate::front::weights::Bindings;
use crate::ir::Module;
use std::path::Path;

/// Imports the text of an XLA HLO module.
pub fn import(
    path: &Path,
    source: &str,
    name: &str,
    bindings: &mut Bindings,
) -> Result<Module, SpecError> {
    let raw = syntax::parse_file(source).map_err(|e| {
        SpecError::new(path, SpecErrorKind::Syntax(e.message)).at(
            Some(Pos {
                line: e.line,
                column: e.column,
            }),
            source,
        )
    })?;
    translate::translate(&raw, name, bindings).map_err(|e| {
        SpecError::new(path, SpecErrorKind::Invalid(e.message))
            .at(
                Some(Pos {
                    line: e.line,
                    column: e.column,
                }),
                source,
            )
            .maybe_hint(e.hint)
    })
}
