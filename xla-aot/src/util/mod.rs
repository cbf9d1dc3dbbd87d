//! Small helpers shared by the front end and the CLI: `.npy` files, name suggestions, a seeded generator.

pub mod npy;
pub mod rng;
pub mod suggest;
