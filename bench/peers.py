"""The same model spec built for each peer framework: JAX (XLA CPU), onnxruntime and numpy.

Each builder takes the parsed spec (dict), the weights ({name: float32 array}) and returns a
function of the model's inputs (numpy arrays, spec order) that returns the outputs (spec order).
Weights are baked in as constants (XLA sees them at compile time, as xla-aot does). The op set is
what the bundled examples and the GEMM benchmarks use; anything else is a clear error.
"""

import json
import struct

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        b, e = meta["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(meta["shape"])
    return out


def pads4(p):
    """Spec padding ([p], [h, w] or [top, left, bottom, right]) as ((top, bottom), (left, right))."""
    p = p or [0]
    if len(p) == 1:
        p = p * 4
    if len(p) == 2:
        p = [p[0], p[1], p[0], p[1]]
    return [(p[0], p[2]), (p[1], p[3])]


def constants(spec):
    out = {}
    for c in spec.get("constants", []):
        v = np.array(c["value"], dtype=np.float32)
        if "shape" in c:
            v = v.reshape(c["shape"])
        out[c["name"]] = v
    return out


def unsupported(framework, op):
    raise SystemExit(f"bench: op `{op}` is not in bench/peers.py's {framework} builder")


# ---- JAX -------------------------------------------------------------------------------------

def jax_model(spec, weights):
    import jax
    import jax.numpy as jnp
    from jax import lax

    consts = constants(spec)

    def f(*xs):
        env = {i["name"]: x for i, x in zip(spec["inputs"], xs)}
        env.update({k: jnp.asarray(v) for k, v in consts.items()})

        def get(n):
            return env[n] if n in env else jnp.asarray(weights[n])

        for op in spec["ops"]:
            ins = [get(n) for n in op["inputs"]]
            k = op["op"]
            if k == "conv2d":
                y = lax.conv_general_dilated(
                    ins[0], ins[1], window_strides=op.get("strides", [1, 1]),
                    padding=pads4(op.get("padding")), rhs_dilation=op.get("dilations", [1, 1]),
                    feature_group_count=op.get("groups", 1),
                    dimension_numbers=("NCHW", "OIHW", "NCHW"))
                if len(ins) == 3:
                    y = y + ins[2][None, :, None, None]
            elif k == "batch_norm":
                x0, g, b, m, v = ins
                s = g / jnp.sqrt(v + op.get("epsilon", 1e-5))
                shape = (1, -1) + (1,) * (x0.ndim - 2)
                y = x0 * s.reshape(shape) + (b - m * s).reshape(shape)
            elif k == "relu":
                y = jnp.maximum(ins[0], 0.0)
            elif k == "relu6":
                y = jnp.clip(ins[0], 0.0, 6.0)
            elif k == "dense":
                y = ins[0] @ ins[1].T
                if len(ins) == 3:
                    y = y + ins[2]
            elif k == "softmax":
                y = jax.nn.softmax(ins[0], axis=op.get("axis", -1))
            elif k == "global_avg_pool":
                y = jnp.mean(ins[0], axis=(2, 3), keepdims=True)
            elif k == "flatten":
                a = op.get("axis", 1)
                y = ins[0].reshape(int(np.prod(ins[0].shape[:a])), -1)
            elif k == "layer_norm":
                x0 = ins[0]
                mu = x0.mean(-1, keepdims=True)
                var = ((x0 - mu) ** 2).mean(-1, keepdims=True)
                y = (x0 - mu) / jnp.sqrt(var + op.get("epsilon", 1e-5)) * ins[1] + ins[2]
            elif k == "reshape":
                y = ins[0].reshape(op["shape"])
            elif k == "transpose":
                y = jnp.transpose(ins[0], op["perm"])
            elif k == "matmul":
                a, b = ins
                if op.get("transpose_a"):
                    a = jnp.swapaxes(a, -1, -2)
                if op.get("transpose_b"):
                    b = jnp.swapaxes(b, -1, -2)
                y = a @ b
            elif k == "mul":
                y = ins[0] * ins[1]
            elif k == "add":
                y = ins[0] + ins[1]
            elif k == "gelu":
                y = jax.nn.gelu(ins[0], approximate=op.get("approximate", "none") == "tanh")
            else:
                unsupported("JAX", k)
            env[op["name"]] = y
        return tuple(env[o] for o in spec["outputs"])

    return f


# ---- onnxruntime -----------------------------------------------------------------------------

ONNX_OPSET = 20  # Gelu (20) and LayerNormalization (17)


def onnx_model(spec, weights):
    """The spec as an ONNX ModelProto (weights as initializers)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    names = {}
    counter = [0]

    def fresh(base):
        counter[0] += 1
        return f"{base}__{counter[0]}"

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    for k, v in list(weights.items()) + list(constants(spec).items()):
        init(k, v)
    shapes = {i["name"]: i["shape"] for i in spec["inputs"]}
    ranks = {k: len(s) for k, s in shapes.items()}
    ranks.update({k: v.ndim for k, v in weights.items()})
    ranks.update({k: v.ndim for k, v in constants(spec).items()})

    def node(op_type, inputs, output, **attrs):
        nodes.append(helper.make_node(op_type, inputs, [output], **attrs))
        return output

    for op in spec["ops"]:
        k, ins, out = op["op"], op["inputs"], op["name"]
        r0 = ranks.get(ins[0], 0)
        if k == "conv2d":
            (t, b), (l, r) = pads4(op.get("padding"))
            node("Conv", ins, out, strides=op.get("strides", [1, 1]), pads=[t, l, b, r],
                 dilations=op.get("dilations", [1, 1]), group=op.get("groups", 1))
            rank = 4
        elif k == "batch_norm":
            node("BatchNormalization", ins, out, epsilon=op.get("epsilon", 1e-5))
            rank = r0
        elif k == "relu":
            node("Relu", ins, out)
            rank = r0
        elif k == "relu6":
            lo = init(fresh("zero"), np.array(0.0, np.float32))
            hi = init(fresh("six"), np.array(6.0, np.float32))
            node("Clip", [ins[0], lo, hi], out)
            rank = r0
        elif k == "dense":
            wt = init(fresh(ins[1] + ".T"), weights[ins[1]].T)
            if r0 == 2:
                node("Gemm", [ins[0], wt] + ins[2:], out)
            elif len(ins) == 3:
                mm = node("MatMul", [ins[0], wt], fresh(out))
                node("Add", [mm, ins[2]], out)
            else:
                node("MatMul", [ins[0], wt], out)
            rank = r0
        elif k == "softmax":
            node("Softmax", ins, out, axis=op.get("axis", -1))
            rank = r0
        elif k == "global_avg_pool":
            node("GlobalAveragePool", ins, out)
            rank = r0
        elif k == "flatten":
            node("Flatten", ins, out, axis=op.get("axis", 1))
            rank = 2
        elif k == "layer_norm":
            node("LayerNormalization", ins, out, axis=op.get("axis", -1), epsilon=op.get("epsilon", 1e-5))
            rank = r0
        elif k == "reshape":
            s = init(fresh("shape"), np.array(op["shape"], np.int64))
            node("Reshape", [ins[0], s], out)
            rank = len(op["shape"])
        elif k == "transpose":
            node("Transpose", ins, out, perm=op["perm"])
            rank = r0
        elif k == "matmul":
            a, b = ins
            for flag, idx in (("transpose_a", 0), ("transpose_b", 1)):
                if op.get(flag):
                    rk = ranks[ins[idx]]
                    perm = list(range(rk - 2)) + [rk - 1, rk - 2]
                    t = node("Transpose", [ins[idx]], fresh(ins[idx] + ".T"), perm=perm)
                    a, b = (t, b) if idx == 0 else (a, t)
            node("MatMul", [a, b], out)
            rank = max(r0, ranks[ins[1]])
        elif k in ("mul", "add"):
            node({"mul": "Mul", "add": "Add"}[k], ins, out)
            rank = max(r0, ranks.get(ins[1], 0))
        elif k == "gelu":
            node("Gelu", ins, out, approximate=op.get("approximate", "none"))
            rank = r0
        else:
            unsupported("ONNX", k)
        ranks[out] = rank
    graph = helper.make_graph(
        nodes, spec["name"],
        [helper.make_tensor_value_info(i["name"], TensorProto.FLOAT, i["shape"]) for i in spec["inputs"]],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in spec["outputs"]],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = 9

    return model


def ort_model(spec, weights):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_model(spec, weights).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    in_names = [i["name"] for i in spec["inputs"]]

    def f(*xs):
        return sess.run(None, dict(zip(in_names, xs)))

    return f


# ---- numpy (float32, OpenBLAS for matrix products) -------------------------------------------

def np_conv2d(x, w, b, strides, padding, dilations, groups):
    (t, bo), (l, r) = pads4(padding)
    x = np.pad(x, ((0, 0), (0, 0), (t, bo), (l, r)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (wd - (kw - 1) * dw - 1) // sw + 1
    # Patches [n, c, oh, ow, kh, kw] as a strided view, then one matrix product per group.
    s = x.strides
    patches = np.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw))
    og = o // groups
    outs = []
    for g in range(groups):
        p = patches[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og].reshape(og, -1)
        p = p.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, -1)
        outs.append((p @ wg.T).reshape(n, oh, ow, og))
    y = np.concatenate(outs, axis=-1).transpose(0, 3, 1, 2)
    if b is not None:
        y = y + b[None, :, None, None]
    return np.ascontiguousarray(y, dtype=np.float32)


def numpy_model(spec, weights):
    consts = constants(spec)

    def softmax(x, axis):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def erf(x):
        # numpy has no erf: Abramowitz & Stegun 7.1.26, absolute error <= 1.5e-7 (float32's level).
        s = np.sign(x)
        a = np.abs(x)
        t = 1 / (1 + np.float32(0.3275911) * a)
        p = t * (np.float32(0.254829592) + t * (np.float32(-0.284496736) + t * (
            np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429)))))
        return s * (1 - p * np.exp(-a * a))

    def f(*xs):
        env = {i["name"]: x for i, x in zip(spec["inputs"], xs)}
        env.update(consts)
        env.update(weights)
        for op in spec["ops"]:
            ins = [env[n] for n in op["inputs"]]
            k = op["op"]
            if k == "conv2d":
                y = np_conv2d(ins[0], ins[1], ins[2] if len(ins) == 3 else None, op.get("strides", [1, 1]),
                              op.get("padding"), op.get("dilations", [1, 1]), op.get("groups", 1))
            elif k == "batch_norm":
                x0, g, b, m, v = ins
                s = g / np.sqrt(v + np.float32(op.get("epsilon", 1e-5)))
                shape = (1, -1) + (1,) * (x0.ndim - 2)
                y = x0 * s.reshape(shape) + (b - m * s).reshape(shape)
            elif k == "relu":
                y = np.maximum(ins[0], np.float32(0))
            elif k == "relu6":
                y = np.clip(ins[0], np.float32(0), np.float32(6))
            elif k == "dense":
                y = ins[0] @ ins[1].T
                if len(ins) == 3:
                    y = y + ins[2]
            elif k == "softmax":
                y = softmax(ins[0], op.get("axis", -1))
            elif k == "global_avg_pool":
                y = ins[0].mean(axis=(2, 3), keepdims=True)
            elif k == "flatten":
                a = op.get("axis", 1)
                y = ins[0].reshape(int(np.prod(ins[0].shape[:a])), -1)
            elif k == "layer_norm":
                x0 = ins[0]
                mu = x0.mean(-1, keepdims=True)
                var = ((x0 - mu) ** 2).mean(-1, keepdims=True)
                y = (x0 - mu) / np.sqrt(var + np.float32(op.get("epsilon", 1e-5))) * ins[1] + ins[2]
            elif k == "reshape":
                y = ins[0].reshape(op["shape"])
            elif k == "transpose":
                y = np.transpose(ins[0], op["perm"])
            elif k == "matmul":
                a, b = ins
                if op.get("transpose_a"):
                    a = np.swapaxes(a, -1, -2)
                if op.get("transpose_b"):
                    b = np.swapaxes(b, -1, -2)
                y = a @ b
            elif k == "mul":
                y = ins[0] * ins[1]
            elif k == "add":
                y = ins[0] + ins[1]
            elif k == "gelu":
                x0 = ins[0]
                if op.get("approximate", "none") == "tanh":
                    y = 0.5 * x0 * (1 + np.tanh(np.float32(0.7978845608) * (x0 + np.float32(0.044715) * x0 ** 3)))
                else:
                    y = 0.5 * x0 * (1 + erf(x0 / np.float32(np.sqrt(2))))
            else:
                unsupported("numpy", k)
            env[op["name"]] = np.asarray(y, dtype=np.float32)
        return tuple(env[o] for o in spec["outputs"])

    return f
