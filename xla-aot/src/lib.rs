//! xla-aot: an ahead-of-time compiler from a model spec to a standalone C-ABI library.
//!
//! One compile path (`compile`): a front end (`front`: YAML spec + weights, ONNX, XLA HLO text)
//! gives an HLO module (`ir`); `compile::optimize` runs the pass pipeline (`passes`) and plans
//! one arena (`arena`); the code generators (`codegen`: a shared LLVM lowering core with CPU and
//! GPU backends beside it) build the object; the writers (`emit`) produce the archive, header,
//! manifest and bindings. The reference interpreter (`interp`) is the oracle of every test.
//! `docs/architecture.md` maps the modules, their layers and their contracts.

pub mod arena;
pub mod build_api;
pub mod codegen;
pub mod compile;
pub mod driver;
pub mod emit;
pub mod front;
pub mod interp;
pub mod ir;
pub mod limits;
pub mod passes;
pub mod profile;
pub mod quant;
pub mod target;
pub mod timeline;
pub mod util;

pub use build_api::Build;
