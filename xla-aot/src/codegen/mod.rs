//! Code generation: LLVM backends that see only HLO and the buffer plan.
//!
//! `cpu` emits x86-64 and aarch64 objects; `math` holds the inline approximations of
//! transcendental functions shared by the backends.

pub mod cpu;
pub mod cuda_host;
pub mod jit;
pub mod math;
pub mod ptx;
