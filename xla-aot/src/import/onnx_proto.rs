//! The ONNX protobuf messages xla-aot reads (a subset of `onnx.proto3`), decoded by `prost`.
