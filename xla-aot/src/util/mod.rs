//! Small helpers shared by the front end and the CLI: `.npy` files and name suggestions.

pub mod npy;
pub mod suggest;
