//! xla-aot: an ahead-of-time compiler from a model spec to a standalone C-ABI library.
//!
//! Pipeline (see DESIGN.md): `front` (YAML spec + weights, ONNX, HLO text) → `ir` (HLO) → passes
//! → codegen → emit.
//! This crate currently holds the front end, the IR with its text form and verifier, and the
//! reference interpreter (`interp`) that every later stage is tested against.

pub mod arena;
pub mod build_api;
pub mod codegen;
pub mod compile;
pub mod driver;
pub mod emit;
pub mod front;
pub mod interp;
pub mod ir;
pub mod passes;
pub mod target;
pub mod util;

pub use build_api::Build;
