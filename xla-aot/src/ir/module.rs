//! HLO modules.
//!
//! Contract: a [`Module`] has a name (the C prefix of the generated library) and one entry
//! [`Computation`] (`inst.rs`: a computation is a list of instructions in a topological order,
//! operands before their users, followed by its named outputs). The verifier (`verify.rs`) checks every
//! invariant; the printer and parser (`print.rs`, `parse.rs`) give the text form with
//! `parse(print(m)) == m`.

use super::api_types::ApiTypes;
use super::inst::Computation;

/// A compilation unit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Module {
    /// Model name: a C identifier.
    pub name: String,
    /// The entry computation.
    pub entry: Computation,
    /// The C API dtypes of inputs and outputs that differ from their IR dtypes (`api.rs`).
    pub api: ApiTypes,
    /// In which type the weights of dots and convolutions are stored (`precision.rs`).
    pub precision: super::Precision,
}
