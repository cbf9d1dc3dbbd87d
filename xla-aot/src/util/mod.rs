//! Small helpers shared by every stage: the C-identifier rule, `.npy` files, name suggestions, a
//! seeded generator.

pub mod c_name;
pub mod npy;
pub mod rng;
pub mod suggest;
