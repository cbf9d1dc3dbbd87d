#!/usr/bin/env python3
"""Writes the slow real-model shapes of issue 46 as small ONNX models, for bench/onnx_vs_ort.py.

    .venv/bin/python bench/shape_models.py --out target/shape-models
    .venv/bin/python bench/onnx_vs_ort.py --threads 1 \\
        $(for m in target/shape-models/*/*.onnx; do echo --onnx $m; done)

Each model is one shape class that two models users brought spend their time in (issue 46's
profiles; the models themselves are not in the project), with seeded random weights (numpy
seed 0), opset 13:
  * conv5x1_gelu_max: a 5x1 convolution from 256 to 512 channels over 512 positions of a
    width-1 image (pads 2, 0), tanh-GELU, then the max over the positions (a byte-sequence
    classifier's body: 86% + 7% of its time);
  * bilstm_512x40: a bidirectional LSTM, hidden 512, input 512, over 40 steps (a CRNN text
    recogniser's sequence model);
  * gemm_1024x8210x40: a Gemm from 1,024 to 8,210 classes over 40 rows (its classifier head);
  * onehot_2048x257x64: a one-hot over 257 values of 2,048 integers (Unsqueeze, Equal, Cast)
    times a 257x64 matrix (the classifier's embedding).
Each goes to its own directory, `OUT/NAME/NAME.onnx` (onnx_vs_ort.py names a model by its file
stem). Inputs: float32 normal values from onnx_vs_ort.py's seed; the one-hot model's int32
input is written as `input_0.npy` beside it (values in [0, 257)), which onnx_vs_ort.py reads.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def _save(model, out, name):
    onnx.checker.check_model(model)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, f"{name}.onnx"))
    return d


def _model(name, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def conv5x1_gelu_max(rng):
    c_in, c_out, n = 256, 512, 512
    w = (rng.standard_normal((c_out, c_in, 5, 1)) / np.sqrt(c_in * 5)).astype(np.float32)
    b = (0.1 * rng.standard_normal(c_out)).astype(np.float32)
    consts = {
        "half": 0.5,
        "one": 1.0,
        "k": 0.044715,
        "s": float(np.sqrt(2.0 / np.pi)),
    }
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[2, 0, 2, 0], kernel_shape=[5, 1]),
        # tanh-GELU: 0.5 y (1 + tanh(s (y + k y^3)))
        helper.make_node("Mul", ["y", "y"], ["y2"]),
        helper.make_node("Mul", ["y2", "y"], ["y3"]),
        helper.make_node("Mul", ["y3", "k"], ["ky3"]),
        helper.make_node("Add", ["y", "ky3"], ["inner"]),
        helper.make_node("Mul", ["inner", "s"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["y", "t1"], ["yt"]),
        helper.make_node("Mul", ["yt", "half"], ["gelu"]),
        helper.make_node("ReduceMax", ["gelu"], ["out"], axes=[2], keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, n, 1])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, c_out, 1])
    return _model("conv5x1_gelu_max", nodes, [x], [out], inits), None


def bilstm(rng):
    hidden, inp, steps = 512, 512, 40
    scale = 1.0 / np.sqrt(hidden)
    w = (scale * rng.standard_normal((2, 4 * hidden, inp))).astype(np.float32)
    r = (scale * rng.standard_normal((2, 4 * hidden, hidden))).astype(np.float32)
    b = (0.1 * rng.standard_normal((2, 8 * hidden))).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (r, "R"), (b, "B"))]
    nodes = [
        helper.make_node(
            "LSTM", ["x", "W", "R", "B"], ["y"], direction="bidirectional", hidden_size=hidden
        )
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, inp])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 2, 1, hidden])
    return _model("bilstm_512x40", nodes, [x], [y], inits), None


def gemm_head(rng):
    k, n, rows = 1024, 8210, 40
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = (0.1 * rng.standard_normal(n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])
    return _model("gemm_1024x8210x40", nodes, [x], [y], inits), None


def onehot(rng):
    positions, values, width = 2048, 257, 64
    e = rng.standard_normal((values, width)).astype(np.float32)
    inits = [
        numpy_helper.from_array(e, "e"),
        numpy_helper.from_array(np.arange(values, dtype=np.int32), "range"),
        numpy_helper.from_array(np.array([1], np.int64), "axis"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis"], ["xu"]),
        helper.make_node("Equal", ["xu", "range"], ["hot"]),
        helper.make_node("Cast", ["hot"], ["hotf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["hotf", "e"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.INT32, [positions])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [positions, width])
    ids = rng.integers(0, values, positions).astype(np.int32)
    return _model("onehot_2048x257x64", nodes, [x], [y], inits), ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="target/shape-models")
    args = ap.parse_args()
    for build in (conv5x1_gelu_max, bilstm, gemm_head, onehot):
        rng = np.random.default_rng(0)
        model, ids = build(rng)
        d = _save(model, args.out, model.graph.name)
        if ids is not None:
            np.save(os.path.join(d, "input_0.npy"), ids)
        print(f"wrote {os.path.join(d, model.graph.name + '.onnx')}")


if __name__ == "__main__":
    main()
