#!/usr/bin/env python3
"""Writes ONNX's nine "light" model architectures, with seeded random weights, and onnxruntime's outputs.

The onnx wheel ships `onnx/backend/test/data/light/light_*.onnx`: alexnet, densenet121,
inception_v1/v2, resnet50, shufflenet, squeezenet, vgg19 and zfnet512 at opset 9 and IR version 3,
whose weights are `ConstantOfShape` fills (every weight 0.02) of int64 shape initializers. Each
model is written as `OUT/<arch>/<arch>.onnx` with every such fill replaced by a seeded random
initializer of the same name, shape and type; the graph is otherwise as shipped (opset 9, IR 3,
every initializer still listed as a graph input, the other initializers and nodes unchanged).
Beside it: `input_0.npy` (seeded normal input) and `output_0.npy` (onnxruntime's output for it,
graph optimisations off). `xla-aot/tests/onnx_light.rs` compiles the models and compares.

    .venv/bin/pip install onnx==1.23.2 onnxruntime==1.32.0
    .venv/bin/python scripts/onnx_light_models.py [--out target/onnx-light] [--seed 0]

Weights are normal, scaled so activations stay O(1): convolution and Gemm weights with He's
sqrt(2 / fan_in); biases 0.05 N; BatchNormalization scale 1 + 0.1 N, bias and mean 0.1 N, variance
0.5 + |0.5 N| (positive); scale and bias vectors applied by Mul and Add (densenet's, through an
Unsqueeze) 1 + 0.1 N and 0.1 N; anything else 0.1 N. Then, as training would, each
BatchNormalization's mean and variance are set to the statistics of its input on the seeded input
(per channel, in dependency order), so deep
models (resnet50, inception_v2, densenet121, shufflenet) keep O(1) activations and their softmax
does not saturate.
"""

import argparse
import os
import shutil
import sys
import warnings
import zlib

ARCHS = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]


def weight_values(rng, np, shape, consumer, node, j):
    """Random values for a weight of `shape` read as input `j` of `node` (through an Unsqueeze,
    `consumer` is the op that finally reads it)."""
    n = rng.standard_normal(shape)
    op = consumer.op_type if consumer is not None else ""
    if op == "Conv" and j == 1:
        fan_in = int(np.prod(shape[1:]))
        return n * np.sqrt(2.0 / fan_in)
    if op == "Gemm" and j == 1:
        trans_b = any(a.name == "transB" and a.i != 0 for a in consumer.attribute)
        fan_in = shape[1] if trans_b else shape[0]
        return n * np.sqrt(2.0 / fan_in)
    if op in ("Conv", "Gemm") and j == 2:
        return 0.05 * n
    if op == "BatchNormalization":
        return {1: 1.0 + 0.1 * n, 2: 0.1 * n, 3: 0.1 * n, 4: 0.5 + np.abs(0.5 * n)}.get(j, 0.1 * n)
    if op == "Mul":
        return 1.0 + 0.1 * n
    return 0.1 * n


def randomize(model, rng, np, onnx, numpy_helper):
    """Replaces each ConstantOfShape weight fill by a random initializer, in place."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    readers = {}
    for node in g.node:
        for j, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, j))
    fills = [n for n in g.node if n.op_type == "ConstantOfShape" and n.input[0] in inits]
    drop_nodes, drop_inits, new_inits = set(), set(), {}
    for fill in fills:
        shape_name, name = fill.input[0], fill.output[0]
        shape = [int(d) for d in numpy_helper.to_array(inits[shape_name])]
        value = next(a.t for a in fill.attribute if a.name == "value")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.data_type)
        users = readers.get(name, [])
        node, j = users[0] if users else (None, 0)
        consumer = node
        if node is not None and node.op_type == "Unsqueeze":
            after = readers.get(node.output[0], [])
            consumer = after[0][0] if after else None
            j = after[0][1] if after else 0
        vals = weight_values(rng, np, shape, consumer, node, j).astype(dtype)
        new_inits[shape_name] = numpy_helper.from_array(vals, name)
        drop_nodes.add(id(fill))
        drop_inits.add(shape_name)
    kept = [n for n in g.node if id(n) not in drop_nodes]
    del g.node[:]
    g.node.extend(kept)
    # Each weight takes the place of its shape initializer, in the initializers and (IR 3 lists
    # every initializer there) in the graph inputs.
    out_inits = [new_inits.get(t.name, t) for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(out_inits)
    out_inputs = []
    for vi in g.input:
        if vi.name in new_inits:
            t = new_inits[vi.name]
            out_inputs.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
        else:
            out_inputs.append(vi)
    del g.input[:]
    g.input.extend(out_inputs)
    return len(fills)


def session(model, ort):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def calibrate(model, feed, np, onnx, ort, numpy_helper):
    """Sets each BatchNormalization's mean and variance to its input's per-channel statistics.

    A BN's input depends on the BNs upstream of it, so they are set level by level (a BN's level:
    the most BNs on a path from the graph input to it), one run per level. The runs override the
    statistics through a probe copy at IR 4, where initializers listed as inputs can be fed."""
    g = model.graph
    level, bns = {}, []
    for node in g.node:
        lv = max((level.get(x, 0) for x in node.input), default=0)
        if node.op_type == "BatchNormalization":
            bns.append((node, lv))
            lv += 1
        for o in node.output:
            level[o] = lv
    if not bns:
        return
    index = {t.name: i for i, t in enumerate(g.initializer)}
    stats = {n.input[j]: numpy_helper.to_array(g.initializer[index[n.input[j]]])
             for n, _ in bns for j in (3, 4)}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.ir_version = max(probe.ir_version, 4)
    del probe.graph.output[:]
    names = [n.input[0] for n, _ in bns]
    probe.graph.output.extend(
        onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in names)
    sess = session(probe, ort)
    for lv in range(max(lv for _, lv in bns) + 1):
        values = sess.run(names, {**feed, **stats})
        for (bn, at), a in zip(bns, values):
            if at == lv:
                axes = tuple(i for i in range(a.ndim) if i != 1)
                stats[bn.input[3]] = a.mean(axis=axes).astype(np.float32)
                stats[bn.input[4]] = (a.var(axis=axes) + 1e-3).astype(np.float32)
    for name, v in stats.items():
        g.initializer[index[name]].CopyFrom(numpy_helper.from_array(v, name))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="target/onnx-light", help="output directory")
    ap.add_argument("--seed", type=int, default=0, help="base seed of weights and inputs")
    args = ap.parse_args()

    warnings.simplefilter("ignore")
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    src = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    for arch in ARCHS:
        model = onnx.load(os.path.join(src, f"light_{arch}.onnx"))
        rng = np.random.default_rng([args.seed, zlib.crc32(arch.encode())])
        n = randomize(model, rng, np, onnx, numpy_helper)
        g = model.graph
        inits = {t.name for t in g.initializer}
        (data,) = [vi for vi in g.input if vi.name not in inits]
        dims = [dim.dim_value for dim in data.type.tensor_type.shape.dim]
        x = rng.standard_normal(dims).astype(np.float32)
        calibrate(model, {data.name: x}, np, onnx, ort, numpy_helper)
        onnx.checker.check_model(model)
        d = os.path.join(args.out, arch)
        os.makedirs(d)
        path = os.path.join(d, f"{arch}.onnx")
        onnx.save(model, path)
        (y,) = session(model, ort).run(None, {data.name: x})
        np.save(os.path.join(d, "input_0.npy"), x)
        np.save(os.path.join(d, "output_0.npy"), y.astype(np.float32))
        print(f"{arch}: {n} weights, output {list(y.shape)}, max |y| {np.abs(y).max():.4g}, "
              f"mean |y| {np.abs(y).mean():.4g}", file=sys.stderr)
    print(f"wrote {len(ARCHS)} light models to {args.out} (onnxruntime {ort.__version__})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
