#!/usr/bin/env python3
"""Times ONNX models compiled by xla-aot against onnxruntime on one thread, and checks that the
outputs agree.

    python3 bench/onnx_vs_ort.py                     # the grouped-convolution micro-benchmarks
    python3 bench/onnx_vs_ort.py --onnx model.onnx   # any ONNX model (f32 inputs)
    python3 bench/onnx_vs_ort.py --models g1x1_272,dw3x3_272 --seconds 1 --rounds 3

Each model is compiled with `xla-aot compile X.onnx --target T` (default x86_64-avx512 on a CPU
with AVX-512, else x86_64-avx2), linked with bench/harness.c and timed pinned to one core
(back-to-back calls, CLOCK_MONOTONIC); onnxruntime runs in this process pinned to the same
core with intra_op_num_threads=1 (its time includes the Python call). Rounds alternate ours and
onnxruntime; the table gives the median of the per-round medians and the minimum over all
calls. Outputs agree when |ours - ort| <= 2e-4 * max(1, max|ort|) (bench/run.py's bound).

The built-in models (opset 13, weights random, seeded) are the convolutions of issue 16:
grouped 1x1 272->272 g=4 at 14x14, 544->544 g=4 at 7x7 and 28x28, a ShuffleNet unit (grouped
1x1 + BN + ReLU, channel shuffle as Reshape/Transpose/Reshape, depthwise 3x3 + BN, grouped 1x1 +
BN, ReLU), and depthwise 3x3 on 272 channels at 14x14.
Python: /work/main/.venv or any environment with numpy, onnx and onnxruntime.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- models -------------------------------------------------------------------------------------

def _conv_model(name, c_in, c_out, hw, k, groups, pad=0, stride=1, seed=0):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((c_out, c_in // groups, k, k)) / np.sqrt(c_in // groups * k * k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32) * 0.1
    oh = (hw + 2 * pad - k) // stride + 1
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, kernel_shape=[k, k],
                            pads=[pad] * 4, strides=[stride, stride])
    g = helper.make_graph([node], name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, oh, oh])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _shufflenet_unit(name, c=272, hw=14, groups=4, seed=0):
    """x -> gconv1x1 -> BN -> ReLU -> shuffle -> dw3x3 -> BN -> gconv1x1 -> BN -> + x -> ReLU."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    mid = c // 4 // groups * groups  # ShuffleNet's bottleneck: a quarter of the channels
    inits, nodes = [], []

    def const(n, a):
        inits.append(numpy_helper.from_array(a.astype(np.float32), n))
        return n

    def bn(x, ch, n):
        nodes.append(helper.make_node(
            "BatchNormalization",
            [x, const(n + ".s", 1 + 0.1 * rng.standard_normal(ch)), const(n + ".b", 0.1 * rng.standard_normal(ch)),
             const(n + ".m", 0.1 * rng.standard_normal(ch)), const(n + ".v", 1 + 0.1 * rng.random(ch))],
            [n], epsilon=1e-5))
        return n

    def conv(x, ci, co, k, g, n, pad=0):
        w = rng.standard_normal((co, ci // g, k, k)) / np.sqrt(ci // g * k * k)
        nodes.append(helper.make_node("Conv", [x, const(n + ".w", w)], [n], group=g,
                                      kernel_shape=[k, k], pads=[pad] * 4))
        return n

    y = conv("x", c, mid, 1, groups, "g1")
    y = bn(y, mid, "bn1")
    nodes.append(helper.make_node("Relu", [y], ["r1"]))
    shape1 = helper.make_tensor("sh1", TensorProto.INT64, [5], [1, groups, mid // groups, hw, hw])
    shape2 = helper.make_tensor("sh2", TensorProto.INT64, [4], [1, mid, hw, hw])
    inits.extend([shape1, shape2])
    nodes.append(helper.make_node("Reshape", ["r1", "sh1"], ["s1"]))
    nodes.append(helper.make_node("Transpose", ["s1"], ["s2"], perm=[0, 2, 1, 3, 4]))
    nodes.append(helper.make_node("Reshape", ["s2", "sh2"], ["s3"]))
    y = conv("s3", mid, mid, 3, mid, "dw", pad=1)
    y = bn(y, mid, "bn2")
    y = conv(y, mid, c, 1, groups, "g2")
    y = bn(y, c, "bn3")
    nodes.append(helper.make_node("Add", [y, "x"], ["sum"]))
    nodes.append(helper.make_node("Relu", ["sum"], ["y"]))
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


BUILTIN = {
    "g1x1_272": lambda n: _conv_model(n, 272, 272, 14, 1, 4),
    "g1x1_544_7": lambda n: _conv_model(n, 544, 544, 7, 1, 4, seed=1),
    "g1x1_544_28": lambda n: _conv_model(n, 544, 544, 28, 1, 4, seed=2),
    "shufflenet_unit": lambda n: _shufflenet_unit(n),
    "dw3x3_272": lambda n: _conv_model(n, 272, 272, 14, 3, 272, pad=1, seed=3),
}


# ---- timing -------------------------------------------------------------------------------------

def default_target():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        flags = ""
    return "x86_64-avx512" if "avx512f" in flags else "x86_64-avx2"


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def pin(cpu):
    try:
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        pass


def time_ort(sess, feeds, seconds):
    for _ in range(10):
        sess.run(None, feeds)
    ts = []
    start = time.perf_counter()
    while len(ts) < 10 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        ts.append(time.perf_counter_ns() - t0)
        if len(ts) >= 200000:
            break
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def bench_one(name, onnx_path, args, xla_aot, tmp):
    import numpy as np
    import onnx
    import onnxruntime as ort

    out_dir = os.path.join(tmp, name)
    run([xla_aot, "compile", onnx_path, "--target", args.target, "--out-dir", out_dir])
    manifests = [f for f in os.listdir(out_dir) if f.endswith(".json")]
    manifest = json.load(open(os.path.join(out_dir, manifests[0])))
    lib = manifests[0][:-5]
    exe = os.path.join(out_dir, "bench")
    run(["cc", "-O2", f"-DMODEL={lib}", "-I", os.path.join(ROOT, "runtime-min", "include"),
         os.path.join(HERE, "harness.c"), os.path.join(out_dir, f"lib{lib}.a"), "-lpthread", "-o", exe])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    model = onnx.load(onnx_path)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    # The library's inputs are the graph inputs that are not initializers, in graph order, under
    # C names; onnxruntime wants the graph names.
    inits = {t.name for t in model.graph.initializer}
    graph_names = [i.name for i in model.graph.input if i.name not in inits]
    rng = np.random.default_rng(0)
    feeds, argv = {}, []
    for i, inp in enumerate(manifest["inputs"]):
        x = rng.standard_normal(inp["shape"]).astype(np.float32)
        feeds[graph_names[i]] = x
        b = os.path.join(out_dir, f"in{i}.bin")
        x.tofile(b)
        argv += [b, str(x.nbytes)]
    outs = manifest["outputs"]
    for i, o in enumerate(outs):
        argv += [os.path.join(out_dir, f"out{i}.bin"), str(4 * int(np.prod(o["shape"])))]
    head = [str(manifest["arena_size"]), str(len(feeds)), str(len(outs))]
    ours_med, ours_min, ort_med, ort_min = [], [], [], []
    for _ in range(args.rounds):
        r = json.loads(run(["taskset", "-c", str(args.cpu), exe, "1", str(args.seconds)] + head + argv))
        ours_med.append(r["median_ns"])
        ours_min.append(r["min_ns"])
        m, mn = time_ort(sess, feeds, args.seconds)
        ort_med.append(m)
        ort_min.append(mn)
    expect = sess.run(None, feeds)
    worst = 0.0
    for i, (o, e) in enumerate(zip(outs, expect)):
        ours = np.fromfile(os.path.join(out_dir, f"out{i}.bin"), dtype=np.float32).reshape(o["shape"])
        bound = 2e-4 * max(1.0, float(np.abs(e).max()))
        worst = max(worst, float(np.abs(ours - e).max()) / bound)
    med = lambda xs: sorted(xs)[len(xs) // 2] / 1000.0
    return {
        "model": name, "ours_us": med(ours_med), "ours_min_us": min(ours_min) / 1000.0,
        "ort_us": med(ort_med), "ort_min_us": min(ort_min) / 1000.0, "agree": worst <= 1.0,
        "err_over_bound": worst,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", action="append", default=[], help="an ONNX model to time (repeatable)")
    ap.add_argument("--models", default="", help="comma-separated built-in models (default: all "
                    "unless --onnx is given): " + ",".join(BUILTIN))
    ap.add_argument("--target", default=default_target())
    ap.add_argument("--seconds", type=float, default=1.0, help="per round and side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="core to pin to")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--keep", help="keep the ONNX models and libraries in this directory")
    ap.add_argument("--xla-aot", help="the xla-aot binary (default: target/release/xla-aot, built if "
                    "missing); another build's binary compares two versions")
    args = ap.parse_args()
    xla_aot = args.xla_aot or os.path.join(ROOT, "target", "release", "xla-aot")
    if not os.path.exists(xla_aot) and not args.xla_aot:
        run(["cargo", "build", "--release", "-p", "xla-aot"], cwd=ROOT)
    import onnx

    selected = [m for m in args.models.split(",") if m] or ([] if args.onnx else list(BUILTIN))
    tmp_ctx = tempfile.TemporaryDirectory(prefix="xla-aot-onnx-")
    tmp = args.keep or tmp_ctx.name
    os.makedirs(tmp, exist_ok=True)
    todo = []
    for name in selected:
        if name not in BUILTIN:
            sys.exit(f"unknown model {name}; built-in: {', '.join(BUILTIN)}")
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(BUILTIN[name](name), path)
        todo.append((name, path))
    todo += [(os.path.splitext(os.path.basename(p))[0], p) for p in args.onnx]
    pin(args.cpu)
    rows = []
    for name, path in todo:
        log(f"bench: {name}")
        rows.append(bench_one(name, path, args, xla_aot, tmp))
    print(f"target {args.target}, {args.rounds} round(s) of {args.seconds} s per side, pinned to cpu {args.cpu}")
    print("| model | ours µs (min) | onnxruntime µs (min) | ours / ort | outputs agree |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['ours_us']:.1f} ({r['ours_min_us']:.1f}) | {r['ort_us']:.1f} "
              f"({r['ort_min_us']:.1f}) | {r['ours_us'] / r['ort_us']:.2f} | "
              f"{'yes' if r['agree'] else 'NO'} ({r['err_over_bound']:.2g} of bound) |")
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)
    if not all(r["agree"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
