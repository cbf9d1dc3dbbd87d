#!/usr/bin/env python3
"""Writes small ONNX models of the patterns real exports use, with dynamic dims, and onnxruntime's
outputs at the shapes the tests fix.

Each model is `OUT/<name>/<name>.onnx`, with `flags.txt` (the build-time settings the test passes:
one `--input-shape`, `--dim` or `--freeze` argument a line), `input_J.npy` (the run-time inputs at
the fixed shapes, in graph order, frozen inputs left out) and `output_J.npy` (onnxruntime's
outputs, with the frozen inputs fed their frozen values). `xla-aot/tests/onnx_patterns.rs`
compiles them with those settings and compares.

- `detector`: images [batch, 3, height, width] → two strided Conv+Relu → Resize ×2 (nearest) →
  Concat with the shallower map → 1×1 Conv → Split into box/objectness/class channels → Sigmoid on
  the last two → Concat → Reshape to [batch, 7, -1] with the batch taken from Shape(images).
- `crnn`: a text-line reader: image [batch, 1, 32, width] → Conv/Relu/MaxPool ×2 → the width as
  the sequence (Transpose, Reshape with Shape arithmetic) → bidirectional LSTM → MatMul →
  LogSoftmax, CTC-style per-column class scores.
- `if_rate`: x [2, 8] and an int64 scalar `rate`; If(rate > 1) { Relu(x)·2 + 1 } else { Tanh(x) }.

Element types at the C API (no flags; inputs and outputs keep their ONNX types in the .npy files):
- `tokens`: int64 token ids [1, 6] → Gather from an embedding [10, 4] → MatMul to 5 logits →
  ArgMax (int64 output [1, 6]) and the logits (float output), plus an int64 scalar `scale` that
  multiplies the logits (Cast to float).
- `image_u8`: a uint8 image [1, 3, 4, 4] → Cast to float → ×1/255 − 0.5 (float output) and
  Greater than 0 (bool output).
- `half`: a float16 export: float16 x [2, 8] → MatMul with float16 weights → Add float16 bias →
  Relu (float16 output).
- `bf16_weights`: float x [2, 8] → MatMul with bfloat16 weights (Cast to float) → float output.

    .venv/bin/pip install onnx==1.23.2 onnxruntime==1.32.0
    .venv/bin/python scripts/onnx_patterns.py [--out target/onnx-patterns]
"""

import argparse
import os
import shutil
import sys
import warnings

OPSET = 17


def detector(np, h, T, nh, rng):
    def w(shape):
        return nh.from_array((rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32))

    inits = []
    def init(name, arr):
        t = nh.from_array(arr) if not hasattr(arr, "name") else arr
        t.name = name
        inits.append(t)
        return name

    init("w1", w((8, 3, 3, 3)))
    init("w2", w((16, 8, 3, 3)))
    init("w3", w((7, 24, 1, 1)))
    init("b3", (0.1 * rng.standard_normal(7)).astype(np.float32))
    init("scales", np.array([1, 1, 2, 2], dtype=np.float32))
    init("split", np.array([4, 1, 2], dtype=np.int64))
    init("zero", np.array([0], dtype=np.int64))
    init("tail", np.array([7, -1], dtype=np.int64))
    nodes = [
        h.make_node("Conv", ["images", "w1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["p3"]),
        h.make_node("Conv", ["p3", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["p4"]),
        h.make_node("Resize", ["p4", "", "scales"], ["up"], mode="nearest"),
        h.make_node("Concat", ["up", "p3"], ["cat"], axis=1),
        h.make_node("Conv", ["cat", "w3", "b3"], ["head"]),
        h.make_node("Split", ["head", "split"], ["box", "obj", "cls"], axis=1),
        h.make_node("Sigmoid", ["obj"], ["obj_s"]),
        h.make_node("Sigmoid", ["cls"], ["cls_s"]),
        h.make_node("Concat", ["box", "obj_s", "cls_s"], ["det4"], axis=1),
        h.make_node("Shape", ["images"], ["shape"]),
        h.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        h.make_node("Concat", ["n", "tail"], ["target"], axis=0),
        h.make_node("Reshape", ["det4", "target"], ["det"]),
    ]
    g = h.make_graph(nodes, "detector",
                     [h.make_tensor_value_info("images", T.FLOAT, ["batch", 3, "height", "width"])],
                     [h.make_tensor_value_info("det", T.FLOAT, ["batch", 7, "cells"])], inits)
    flags = ["--input-shape", "images=1,3,64,96"]
    feeds = {"images": rng.standard_normal((1, 3, 64, 96)).astype(np.float32)}
    return g, flags, feeds, {}


def crnn(np, h, T, nh, rng):
    inits = []
    def init(name, arr):
        t = nh.from_array(arr.astype(arr.dtype))
        t.name = name
        inits.append(t)
        return name

    def he(shape):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32)

    hidden, feat, classes = 16, 16 * 8, 10
    init("w1", he((8, 1, 3, 3)))
    init("w2", he((16, 8, 3, 3)))
    init("W", (0.2 * rng.standard_normal((2, 4 * hidden, feat))).astype(np.float32))
    init("R", (0.2 * rng.standard_normal((2, 4 * hidden, hidden))).astype(np.float32))
    init("B", (0.1 * rng.standard_normal((2, 8 * hidden))).astype(np.float32))
    init("fc", (0.3 * rng.standard_normal((2 * hidden, classes))).astype(np.float32))
    init("i0", np.array([0], dtype=np.int64))
    init("i2", np.array([2], dtype=np.int64))
    init("feat", np.array([feat], dtype=np.int64))
    init("seq2", np.array([0, 0, 2 * hidden], dtype=np.int64))
    nodes = [
        h.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Conv", ["m1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["r2"]),
        h.make_node("MaxPool", ["r2"], ["m2"], kernel_shape=[2, 1], strides=[2, 1]),
        # [N, 16, 8, W'] → [W', N, 16·8]
        h.make_node("Transpose", ["m2"], ["t"], perm=[3, 0, 1, 2]),
        h.make_node("Shape", ["t"], ["ts"]),
        h.make_node("Slice", ["ts", "i0", "i2", "i0"], ["wn"]),
        h.make_node("Concat", ["wn", "feat"], ["sshape"], axis=0),
        h.make_node("Reshape", ["t", "sshape"], ["seq"]),
        h.make_node("LSTM", ["seq", "W", "R", "B"], ["y", "yh"], hidden_size=hidden,
                    direction="bidirectional"),
        # Y [T, 2, N, H] → [T, N, 2H]
        h.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["yt", "seq2"], ["ys"]),
        h.make_node("MatMul", ["ys", "fc"], ["logits"]),
        h.make_node("LogSoftmax", ["logits"], ["scores"], axis=-1),
    ]
    g = h.make_graph(nodes, "crnn",
                     [h.make_tensor_value_info("image", T.FLOAT, ["batch", 1, 32, "width"])],
                     [h.make_tensor_value_info("scores", T.FLOAT, ["steps", "batch", classes])],
                     inits)
    flags = ["--dim", "batch=1", "--dim", "width=48"]
    feeds = {"image": rng.standard_normal((1, 1, 32, 48)).astype(np.float32)}
    return g, flags, feeds, {}


def if_rate(np, h, T, nh, rng):
    def branch(name, nodes, out):
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info(out, T.FLOAT, [2, 8])])

    two = nh.from_array(np.array(2.0, dtype=np.float32), "two")
    one = nh.from_array(np.array(1.0, dtype=np.float32), "one_f")
    then_g = branch("then", [h.make_node("Relu", ["x"], ["r"]), h.make_node("Mul", ["r", "two"], ["m"]),
                             h.make_node("Add", ["m", "one_f"], ["t"])], "t")
    then_g.initializer.extend([two, one])
    else_g = branch("else", [h.make_node("Tanh", ["x"], ["e"])], "e")
    nodes = [
        h.make_node("Greater", ["rate", "one"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    g = h.make_graph(nodes, "if_rate",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 8]),
                      h.make_tensor_value_info("rate", T.INT64, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 8])],
                     [nh.from_array(np.array(1, dtype=np.int64), "one")])
    flags = ["--freeze", "rate=2"]
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    return g, flags, feeds, {"rate": np.array(2, dtype=np.int64)}


def tokens(np, h, T, nh, rng):
    emb = nh.from_array(rng.standard_normal((10, 4)).astype(np.float32), "emb")
    proj = nh.from_array(rng.standard_normal((4, 5)).astype(np.float32), "proj")
    nodes = [
        h.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
        h.make_node("MatMul", ["e", "proj"], ["l0"]),
        h.make_node("Cast", ["scale"], ["scale_f"], to=T.FLOAT),
        h.make_node("Mul", ["l0", "scale_f"], ["logits"]),
        h.make_node("ArgMax", ["logits"], ["best"], axis=-1, keepdims=0),
    ]
    g = h.make_graph(nodes, "tokens",
                     [h.make_tensor_value_info("ids", T.INT64, [1, 6]),
                      h.make_tensor_value_info("scale", T.INT64, [])],
                     [h.make_tensor_value_info("best", T.INT64, [1, 6]),
                      h.make_tensor_value_info("logits", T.FLOAT, [1, 6, 5])],
                     [emb, proj])
    feeds = {"ids": np.array([[3, 0, 9, 7, 7, 1]], dtype=np.int64),
             "scale": np.array(3, dtype=np.int64)}
    return g, [], feeds, {}


def image_u8(np, h, T, nh, rng):
    nodes = [
        h.make_node("Cast", ["img"], ["f"], to=T.FLOAT),
        h.make_node("Mul", ["f", "inv255"], ["s"]),
        h.make_node("Sub", ["s", "half"], ["x"]),
        h.make_node("Greater", ["x", "zero"], ["bright"]),
    ]
    g = h.make_graph(nodes, "image_u8",
                     [h.make_tensor_value_info("img", T.UINT8, [1, 3, 4, 4])],
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 4, 4]),
                      h.make_tensor_value_info("bright", T.BOOL, [1, 3, 4, 4])],
                     [nh.from_array(np.array(1 / 255, dtype=np.float32), "inv255"),
                      nh.from_array(np.array(0.5, dtype=np.float32), "half"),
                      nh.from_array(np.array(0.0, dtype=np.float32), "zero")])
    feeds = {"img": rng.integers(0, 256, (1, 3, 4, 4)).astype(np.uint8)}
    return g, [], feeds, {}


def half(np, h, T, nh, rng):
    w = nh.from_array((0.5 * rng.standard_normal((8, 4))).astype(np.float16), "w")
    b = nh.from_array((0.1 * rng.standard_normal(4)).astype(np.float16), "b")
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["m"]),
        h.make_node("Add", ["m", "b"], ["a"]),
        h.make_node("Relu", ["a"], ["y"]),
    ]
    g = h.make_graph(nodes, "half",
                     [h.make_tensor_value_info("x", T.FLOAT16, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT16, [2, 4])], [w, b])
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float16)}
    return g, [], feeds, {}


def bf16_weights(np, h, T, nh, rng):
    wf = (0.5 * rng.standard_normal((8, 4))).astype(np.float32)
    # bfloat16 bits: the top half of the float32 bits, rounded to nearest even.
    bits = wf.view(np.uint32)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    w = h.make_tensor("w", T.BFLOAT16, [8, 4], bits.tobytes(), raw=True)
    nodes = [
        h.make_node("Cast", ["w"], ["wf"], to=T.FLOAT),
        h.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    g = h.make_graph(nodes, "bf16_weights",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 4])], [w])
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    return g, [], feeds, {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="target/onnx-patterns", help="output directory")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    for k, make in enumerate([detector, crnn, if_rate, tokens, image_u8, half, bf16_weights]):
        rng = np.random.default_rng(100 + k)
        g, flags, feeds, frozen = make(np, h, T, nh, rng)
        model = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], producer_name="onnx_patterns.py")
        model.ir_version = 8
        onnx.checker.check_model(model)
        name = g.name
        d = os.path.join(args.out, name)
        os.makedirs(d)
        onnx.save(model, os.path.join(d, f"{name}.onnx"))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        outs = sess.run(None, {**feeds, **frozen})
        with open(os.path.join(d, "flags.txt"), "w") as f:
            f.write("".join(f + "\n" for f in flags))
        for j, vi in enumerate(i for i in g.input if i.name in feeds):
            np.save(os.path.join(d, f"input_{j}.npy"), feeds[vi.name])
        for j, y in enumerate(outs):
            # float64 results as float32; the others keep their type (int64, bool, float16).
            np.save(os.path.join(d, f"output_{j}.npy"), y.astype(np.float32) if y.dtype == np.float64 else y)
        print(f"{name}: {' '.join(flags)}; outputs {[list(o.shape) for o in outs]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
