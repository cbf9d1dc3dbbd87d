//! Small helpers shared by every stage: the C-identifier rule, name suggestions, a seeded
//! generator. Nothing here depends on another module of the crate.

pub mod c_name;
pub mod rng;
pub mod suggest;
