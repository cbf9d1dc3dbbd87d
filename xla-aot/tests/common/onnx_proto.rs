//! ONNX protobuf pieces the tests build models from (`onnx.helper`'s `make_tensor_value_info` and
//! `make_node`, in Rust).

use xla_aot::front::onnx::proto::{
    AttributeProto, NodeProto, TensorShapeProto, TypeProto, ValueInfoProto, attribute_type,
    tensor_shape_proto, type_proto,
};

/// A tensor value `name` of element type `elem` (1 float, 6 int32, 7 int64) and fixed `dims`.
pub fn value(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                        })
                        .collect(),
                }),
            })),
        }),
    }
}

/// A node `name` of `op` from `inputs` to `outputs`, without attributes.
pub fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// An integer attribute `name = v` (`onnx.helper.make_attribute` for an int).
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}
