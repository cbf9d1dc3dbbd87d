//! Small helpers shared by every stage: the C-identifier rule, name suggestions, I/O error
//! wording, a seeded generator. Nothing here depends on another module of the crate.

pub mod c_name;
pub mod io;
pub mod rng;
pub mod shorten;
pub mod suggest;
pub mod yaml_depth;
