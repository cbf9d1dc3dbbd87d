//! TFLite's flatbuffer schema as Rust: `schema_generated.rs` is written by planus-cli 1.3.0 from
//! `schema/schema.fbs`, TFLite's published schema (version 3, revision 3d) copied unchanged from
//! tensorflow/tflite-micro; `generate.sh` regenerates it and says what it strips on the way in.
//!
//! Contract: nothing here is written by hand. Every read through these types is checked by the
//! planus runtime (offsets, lengths, union tags, enum values) and returns a `planus::Result`,
//! never panics, on any bytes; `xla-aot`'s `front/tflite` turns those errors into positioned
//! ones. The code lives in its own crate so that the compiler's incremental builds do not
//! recompile its 71,000 generated lines.

#![allow(clippy::all, clippy::pedantic, unused, missing_docs)]

mod schema_generated;

pub use schema_generated::tflite;

mod op_names;

pub use op_names::builtin_name;
