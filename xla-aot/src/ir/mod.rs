//! The HLO intermediate representation: typed SSA instructions in one entry computation.
//!
//! The IR knows no input format, no pass and no backend. Files, one concept each:
//! `shape` (dtype, dims, layout), `literal` (constant data), `npy` (literals as `.npy` files), `inst` (opcodes, attributes and the
//! computations instructions form), `module`, `precision` (the weights' storage type), `flops` (operation counts), `shape_inference` (typing rules), `builder`, `print`/`parse` (the text
//! form), `verify` (invariants), `shuffle` (the channel shuffle pattern).

pub mod api;
pub mod api_types;
pub mod builder;
pub mod fixed_point;
pub mod flops;
pub mod half;
pub mod inst;
pub mod literal;
pub mod module;
pub mod npy;
pub mod parse;
pub mod precision;
pub mod print;
pub mod shape;
pub mod shape_inference;
pub mod shuffle;
pub mod value_range;
pub mod verify;

pub use api_types::ApiTypes;
pub use builder::Builder;
pub use inst::{
    BinaryOp, CompareDir, DotDims, FusionKind, InstId, Instruction, Op, ReduceKind, UnaryOp, Window,
};
pub use inst::{Computation, Output};
pub use literal::{Literal, LiteralData};
pub use module::Module;
pub use parse::{HloParseError, parse_module};
pub use precision::{F16_K_BLOCK, Precision};
pub use print::{PrintOptions, print_module, print_module_with};
pub use shape::{DType, Layout, Shape};
pub use verify::{VerifyError, verify};
