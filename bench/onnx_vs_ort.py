#!/usr/bin/env python3
"""Times ONNX models compiled by xla-aot against onnxruntime, on one thread and on N threads
through the library's parallel-for hook, and checks that the outputs agree.

    python3 bench/onnx_vs_ort.py                      # the grouped-convolution micro-benchmarks
    python3 bench/onnx_vs_ort.py --light              # onnx's nine light architectures + the bars
    python3 bench/onnx_vs_ort.py --light --models squeezenet,shufflenet --seconds 0.5
    python3 bench/onnx_vs_ort.py --onnx model.onnx --input-shape images=1,3,224,224
    python3 bench/onnx_vs_ort.py --onnx a.onnx --onnx b.onnx --dim batch=1 --freeze scale=0.5
    python3 bench/run.py --light                      # the same, through bench/run.py

Models:
  * built-in (default when neither --onnx nor --light is given; opset 13, seeded random weights):
    the convolutions of issue 16: grouped 1x1 272->272 g=4 at 14x14, 544->544 g=4 at 7x7 and
    28x28, a ShuffleNet unit (grouped 1x1 + BN + ReLU, channel shuffle as
    Reshape/Transpose/Reshape, depthwise 3x3 + BN, grouped 1x1 + BN, ReLU), and depthwise 3x3 on
    272 channels at 14x14;
  * --onnx FILE (repeatable): any ONNX model whose run-time inputs are float32, int32 or bool.
    --input-shape NAME=D0,D1,..., --dim SYMBOL=N and --freeze NAME=VALUE|FILE.npy (each
    repeatable) go to `xla-aot compile` for every --onnx model, as on its command line;
    onnxruntime is fed the same shapes (those of the compiled library's manifest) and frozen
    inputs get their frozen values;
  * --light [DIR]: onnx's nine light architectures (bvlc_alexnet, densenet121, inception_v1,
    inception_v2, resnet50, shufflenet, squeezenet, vgg19, zfnet512) with seeded random weights,
    as written by `scripts/onnx_light_models.py --out DIR` (default DIR: $XLA_AOT_ONNX_LIGHT_DIR,
    else target/onnx-light). --models NAME,... picks a subset of whichever set runs.

Inputs: `input_<i>.npy` beside a model file when it has the shape and type of run-time input i
(the light models have one), else seeded normal values for float inputs, zeros for int32 and
true for bool.

Timing: each model is compiled with `xla-aot compile X.onnx --target T` (default x86_64-avx512 on
a CPU with AVX-512, else x86_64-avx2; the output says which ran), linked with bench/harness.c and
called back to back (CLOCK_MONOTONIC per call). One thread: ours pinned to --cpu with no hook
registered; onnxruntime in this process pinned to the same core, intra_op_num_threads=1 (its
time includes the Python call). --threads N (default 2; 1 skips it): ours with N threads through
<name>_set_parallel_for (harness.c's spinning pool), onnxruntime with intra_op_num_threads=N,
both pinned to N cores starting at --cpu (unpinned when the machine has no more than N). Each
round runs ours 1t, ort 1t, ours Nt, ort Nt; the table gives the median of the per-round medians
(minimum over all calls in parentheses) and the geometric mean of ours/ort over the models that
ran. Outputs agree when |ours - ort| <= 2e-4 * max(1, max|ort|) (bench/run.py's bound), or, for an
output a DequantizeLinear with a constant scale writes, within one quantization step (issue 17's
bar); ours on N threads must give the same bits as on one.

Bars (issue 16; printed as PASS/FAIL for the light models that ran, with the ISA target): ours <=
0.9x onnxruntime on one thread for every light architecture except shufflenet, whose bar is
1.0x; the geometric mean over the nine <= 0.7x (SKIP when --models left some out, FAIL when one
failed); resnet50 on 2 threads through the hook >= 1.7x its one-thread speed (SKIP unless
--threads 2). Timings only mean something on an otherwise idle machine.

Exit status: 1 when a model failed (compile, link, run or onnxruntime; the row says which, with
the tool's error line, and the other models still run) or outputs disagree; a bar that FAILs
does not change it. Python: /work/main/.venv or any environment with numpy, onnx and
onnxruntime. The compiler: --xla-aot BIN, else $XLA_AOT_EXECUTABLE, else target/release/xla-aot
(built with cargo if missing).
"""
import argparse
import json
import math
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


LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]

# Bars of issue 16 for the light models: ours / onnxruntime on one thread.
LIGHT_BAR = 0.9
LIGHT_BAR_EXCEPT = {"shufflenet": 1.0}
LIGHT_GEOMEAN_BAR = 0.7
THREADS_BAR_MODEL, THREADS_BAR_N, THREADS_BAR = "resnet50", 2, 1.7   # N threads >= 1.7x one

AGREE_REL = 2e-4
# Run-time input and output types of a compiled library (manifest dtype) and of onnxruntime.
MANIFEST_DTYPES = {"f32": ("float32", 4), "i32": ("int32", 4), "pred": ("bool", 1)}
ORT_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
              "tensor(int32)": "int32", "tensor(int64)": "int64", "tensor(int16)": "int16",
              "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool"}


# ---- helpers ------------------------------------------------------------------------------------

class Failed(Exception):
    """A model that could not be timed: the stage (compile, link, run, onnxruntime, inputs, model)
    and one line saying why."""

    def __init__(self, stage, line):
        super().__init__(f"{stage}: {line}")
        self.stage, self.line = stage, line


def error_line(text):
    """The line of a tool's output that says what went wrong: the first naming an error (with
    xla-aot's location line when it names a node, or the message after a Rust panic's location),
    else the last line."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for i, l in enumerate(lines):
        if "panicked" in l:
            return l + (" " + lines[i + 1] if i + 1 < len(lines) else "")
        if "error" in l.lower():
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if nxt.startswith("-->") and ": " in nxt:   # xla-aot's location: `--> FILE: node #3 (Op)`
                return f"{l} ({nxt.split(': ', 1)[1]})"
            return l
    return lines[-1] if lines else "(no output)"


def run_tool(stage, cmd, **kw):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except OSError as e:
        raise Failed(stage, f"{cmd[0]}: {e}")
    if r.returncode != 0:
        raise Failed(stage, f"{error_line(r.stderr + r.stdout)} (exit status {r.returncode})")
    return r.stdout


def default_target():
    """x86_64-avx512 on a CPU with AVX-512F, else x86_64-avx2 (the AVX-512 build would not run)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        flags = []
    return "x86_64-avx512" if "avx512f" in flags else "x86_64-avx2"


def isa(target):
    return "AVX-512" if "avx512" in target else "AVX2" if "avx2" in target else target


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def set_affinity(cpus):
    try:
        os.sched_setaffinity(0, cpus)   # this thread; threads it creates later inherit it
    except (AttributeError, OSError):
        pass


def taskset(cpus):
    return ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []


def time_ort(sess, feeds, seconds):
    warm = time.perf_counter()
    for i in range(10):
        sess.run(None, feeds)
        if i >= 1 and time.perf_counter() - warm > seconds:
            break
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


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ---- one model ----------------------------------------------------------------------------------

class Ctx:
    """What every model's run shares: the arguments, the compiler, the core sets."""

    def __init__(self, args, xla_aot, tmp, one, many):
        self.args, self.xla_aot, self.tmp = args, xla_aot, tmp
        self.one = one      # {cpu}: the single-threaded runs
        self.many = many    # the cores of the N-thread runs, or None: unpinned
        self.all = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def ort_session(path, threads, config=()):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3   # errors only: the light models' unused initializers draw warnings
    for entry in config:
        key, _, value = entry.partition("=")
        so.add_session_config_entry(key, value)
    try:
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise Failed("onnxruntime", error_line(str(e)))


def resolve_input(ref, graph):
    """The position among onnxruntime's run-time inputs of an input named by name or position."""
    if ref.isdigit():
        if int(ref) < len(graph):
            return int(ref)
    else:
        for i, g in enumerate(graph):
            if g.name == ref:
                return i
    raise Failed("inputs", f"no input {ref!r}; onnxruntime's inputs are {', '.join(g.name for g in graph)}")


def make_feeds(model_path, manifest, sess, flags):
    """onnxruntime's feeds and the library's inputs (in its order): the compiled shapes, frozen
    inputs at their frozen values."""
    import numpy as np

    graph = sess.get_inputs()
    shapes = {resolve_input(r, graph): [int(d) for d in s.split(",") if d.strip()]
              for r, s in (x.split("=", 1) for x in flags["input_shape"])}
    dims = {k: int(v) for k, v in (x.split("=", 1) for x in flags["dim"])}
    frozen = {resolve_input(r, graph): v for r, v in (x.split("=", 1) for x in flags["freeze"])}
    runtime = [i for i in range(len(graph)) if i not in frozen]
    if len(runtime) != len(manifest["inputs"]):
        raise Failed("inputs", f"the library has {len(manifest['inputs'])} inputs, onnxruntime "
                     f"{len(graph)} ({len(frozen)} frozen)")
    rng = np.random.default_rng(0)
    feeds, ours = {}, []
    for k, (gi, m) in enumerate(zip(runtime, manifest["inputs"])):
        if m["dtype"] not in MANIFEST_DTYPES:
            raise Failed("inputs", f"input {m['name']} is {m['dtype']}; the harness feeds f32, i32 and pred")
        dt = MANIFEST_DTYPES[m["dtype"]][0]
        if ORT_DTYPES.get(graph[gi].type) != dt:
            raise Failed("inputs", f"input {k} ({m['name']}) is {m['dtype']} in the library but "
                         f"{graph[gi].type} in onnxruntime ({graph[gi].name})")
        x = None
        beside = os.path.join(os.path.dirname(model_path), f"input_{k}.npy")
        if os.path.exists(beside):
            a = np.load(beside)
            if list(a.shape) == list(m["shape"]) and a.dtype == np.dtype(dt):
                x = np.ascontiguousarray(a)
        if x is None:
            if dt == "float32":
                x = rng.standard_normal(m["shape"]).astype(np.float32)
            elif dt == "bool":
                x = np.ones(m["shape"], dtype=bool)
            else:
                x = np.zeros(m["shape"], dtype=dt)
        feeds[graph[gi].name] = x
        ours.append(x)
    for gi, v in frozen.items():
        g = graph[gi]
        dt = ORT_DTYPES.get(g.type)
        if dt is None:
            raise Failed("inputs", f"frozen input {g.name} has type {g.type}, which this script cannot feed onnxruntime")
        if v.endswith(".npy"):
            feeds[g.name] = np.load(v).astype(dt)
            continue
        vals = [float(s) for s in v.split(",")]
        shape = shapes.get(gi)
        if shape is None:
            shape = [d if isinstance(d, int) else dims.get(d) for d in (g.shape or [])]
            if any(d is None for d in shape):
                raise Failed("inputs", f"the shape of frozen input {g.name} is {g.shape}: give "
                             f"--input-shape {g.name}=D0,D1,... so onnxruntime gets it too")
        n = int(np.prod(shape)) if shape else 1
        if len(vals) == 1:
            feeds[g.name] = np.full(shape, vals[0]).astype(dt)
        elif len(vals) == n:
            feeds[g.name] = np.array(vals).astype(dt).reshape(shape)
        else:
            raise Failed("inputs", f"--freeze {g.name} gives {len(vals)} values for shape {shape}")
    return feeds, ours


def output_steps(path):
    """Per graph output, the scale of the DequantizeLinear that writes it (through Reshape, Flatten,
    Squeeze, Identity), when that scale is a constant: its quantization step. None otherwise."""
    import onnx
    from onnx import numpy_helper as nh
    m = onnx.load(path, load_external_data=False)
    inits = {i.name: i for i in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    steps = []
    for out in m.graph.output:
        n = prod.get(out.name)
        while n is not None and n.op_type in ("Reshape", "Flatten", "Squeeze", "Identity"):
            n = prod.get(n.input[0])
        step = None
        if n is not None and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            try:
                step = float(nh.to_array(inits[n.input[1]]).max())
            except Exception:
                step = None
        steps.append(step)
    return steps


def bench_one(name, path, kind, ctx):
    import numpy as np

    args = ctx.args
    if not os.path.exists(path):
        hint = (f"; write the light models with scripts/onnx_light_models.py --out {os.path.dirname(os.path.dirname(path))}"
                if kind == "light" else "")
        raise Failed("model", f"{path} does not exist{hint}")
    flags = {"input_shape": args.input_shape, "dim": args.dim, "freeze": args.freeze} if kind == "onnx" \
        else {"input_shape": [], "dim": [], "freeze": []}
    extra = [f for k, opt in (("input_shape", "--input-shape"), ("dim", "--dim"), ("freeze", "--freeze"))
             for v in flags[k] for f in (opt, v)]
    out_dir = os.path.join(ctx.tmp, name)
    t0 = time.perf_counter()
    run_tool("compile", [ctx.xla_aot, "compile", path, "--target", args.target, "--out-dir", out_dir] + extra)
    compile_s = time.perf_counter() - t0
    manifests = sorted(f for f in os.listdir(out_dir) if f.endswith(".json"))
    manifest = json.load(open(os.path.join(out_dir, manifests[0])))
    lib = manifests[0][:-5]
    exe = os.path.join(out_dir, "bench")
    run_tool("link", ["cc", "-O2", f"-DMODEL={lib}", "-I", os.path.join(ROOT, "runtime-min", "include"),
                      os.path.join(HERE, "harness.c"), os.path.join(out_dir, f"lib{lib}.a"), "-lpthread", "-o", exe])
    n = args.threads
    set_affinity(ctx.one)
    sess1 = ort_session(path, 1, args.ort_config)
    feeds, xs = make_feeds(path, manifest, sess1, flags)
    in_argv = []
    for i, x in enumerate(xs):
        b = os.path.join(out_dir, f"in{i}.bin")
        x.tofile(b)
        in_argv += [b, str(x.nbytes)]
    outs = manifest["outputs"]
    for o in outs:
        if o["dtype"] not in MANIFEST_DTYPES:
            raise Failed("outputs", f"output {o['name']} is {o['dtype']}; the harness reads f32, i32 and pred")

    def out_argv(tag):
        return [a for i, o in enumerate(outs)
                for a in (os.path.join(out_dir, f"out{i}{tag}.bin"),
                          str(MANIFEST_DTYPES[o["dtype"]][1] * int(np.prod(o["shape"]))))]

    def ours(threads, cpus, tag):
        head = [str(manifest["arena_size"]), str(len(xs)), str(len(outs))]
        cmd = taskset(cpus) + [exe, str(threads), str(args.seconds)] + head + in_argv + out_argv(tag)
        r = json.loads(run_tool("run", cmd))
        return r["median_ns"], r["min_ns"]

    def read_outs(tag):
        return [np.fromfile(os.path.join(out_dir, f"out{i}{tag}.bin"), dtype=MANIFEST_DTYPES[o["dtype"]][0])
                for i, o in enumerate(outs)]

    sess_n = None
    if n > 1:
        set_affinity(ctx.many or ctx.all)   # its pool's threads are created now and keep this
        sess_n = ort_session(path, n, args.ort_config)
        set_affinity(ctx.one)
    t = {k: [] for k in ("ours", "ort", "ours_n", "ort_n")}

    def ort_timed(sess, cpus):
        set_affinity(cpus)
        try:
            return time_ort(sess, feeds, args.seconds)
        except Exception as e:
            raise Failed("onnxruntime", error_line(str(e)))
        finally:
            set_affinity(ctx.one)

    for rnd in range(args.rounds):
        log(f"bench: {name}: round {rnd + 1} of {args.rounds}")
        t["ours"].append(ours(1, ctx.one, ""))
        t["ort"].append(ort_timed(sess1, ctx.one))
        if n > 1:
            # Unpinned means every core this process may use: the harness would otherwise
            # inherit this thread's single-core affinity and run its pool on one core.
            t["ours_n"].append(ours(n, ctx.many or ctx.all, f"_t{n}"))
            t["ort_n"].append(ort_timed(sess_n, ctx.many or ctx.all))
    try:
        expect = sess1.run(None, feeds)
    except Exception as e:
        raise Failed("onnxruntime", error_line(str(e)))
    if len(expect) != len(outs):
        raise Failed("outputs", f"the library has {len(outs)} outputs, onnxruntime {len(expect)}")
    got = read_outs("")
    steps = output_steps(path)
    worst = 0.0
    for i, (g, e) in enumerate(zip(got, expect)):
        e = np.asarray(e)
        if g.size != e.size:
            raise Failed("outputs", f"an output has {g.size} elements in the library, {e.size} in onnxruntime")
        g, e = g.reshape(e.shape).astype(np.float64), e.astype(np.float64)
        bound = AGREE_REL * max(1.0, float(np.abs(e).max()) if e.size else 1.0)
        if steps[i] is not None:
            # A dequantized output: issue 17's bar, one quantization step of the output.
            bound = max(bound, steps[i] * (1 + 1e-6))
        err = float(np.abs(g - e).max()) if e.size else 0.0
        worst = max(worst, err / bound if err == err else math.inf)
    row = {"model": name, "kind": kind, "compile_s": compile_s, "agree": worst <= 1.0, "err_over_bound": worst}
    med = lambda xs: sorted(x[0] for x in xs)[(len(xs) - 1) // 2] / 1000.0  # noqa: E731
    low = lambda xs: min(x[1] for x in xs) / 1000.0  # noqa: E731
    for k, v in t.items():
        if v:
            row[k + "_us"], row[k + "_min_us"] = med(v), low(v)
    if n > 1:
        row["bits_same"] = all(a.tobytes() == b.tobytes() for a, b in zip(got, read_outs(f"_t{n}")))
    return row


# ---- report -------------------------------------------------------------------------------------

def bars(rows, args):
    """[(PASS|FAIL|SKIP, text)] for the light models that ran."""
    light = {r["model"]: r for r in rows if r.get("kind") == "light"}
    out = []
    for m in (m for m in LIGHT if m in light):
        r, bar = light[m], LIGHT_BAR_EXCEPT.get(m, LIGHT_BAR)
        if "error" in r:
            out.append(("FAIL", f"{m}: ours / onnxruntime, 1 thread <= {bar}: did not run ({r['error']})"))
        else:
            ratio = r["ours_us"] / r["ort_us"]
            out.append(("PASS" if ratio <= bar else "FAIL", f"{m}: ours / onnxruntime, 1 thread {ratio:.3f} <= {bar}"))
    if light:
        ok = [r for m, r in light.items() if "error" not in r]
        g = geomean([r["ours_us"] / r["ort_us"] for r in ok])
        gs = f"{g:.3f}" if g else "-"
        if len(ok) == len(LIGHT):
            out.append(("PASS" if g <= LIGHT_GEOMEAN_BAR else "FAIL",
                        f"geometric mean over the nine light models, 1 thread {gs} <= {LIGHT_GEOMEAN_BAR}"))
        elif len(light) == len(LIGHT):   # all nine asked for, some did not run
            out.append(("FAIL", f"geometric mean over the nine light models <= {LIGHT_GEOMEAN_BAR}: "
                        f"{len(LIGHT) - len(ok)} did not run (the others' geometric mean {gs})"))
        else:
            out.append(("SKIP", f"geometric mean over the nine light models <= {LIGHT_GEOMEAN_BAR}: "
                        f"{len(ok)} of {len(LIGHT)} ran (their geometric mean {gs})"))
    if THREADS_BAR_MODEL in light:
        r = light[THREADS_BAR_MODEL]
        what = f"{THREADS_BAR_MODEL}: {THREADS_BAR_N} threads through the hook >= {THREADS_BAR}x one"
        if args.threads != THREADS_BAR_N:
            out.append(("SKIP", f"{what}: run with --threads {THREADS_BAR_N}"))
        elif "error" in r:
            out.append(("FAIL", f"{what}: did not run ({r['error']})"))
        else:
            sp = r["ours_us"] / r["ours_n_us"]
            out.append(("PASS" if sp >= THREADS_BAR else "FAIL",
                        f"{THREADS_BAR_MODEL}: {THREADS_BAR_N} threads through the hook {sp:.2f}x one >= {THREADS_BAR}"))
    return out


def report(rows, args, ctx):
    import onnxruntime as ort

    n = args.threads
    fmt = lambda r, k: f"{r[k + '_us']:.1f} ({r[k + '_min_us']:.1f})"  # noqa: E731
    many = ",".join(map(str, sorted(ctx.many))) if ctx.many else "unpinned"
    lines = [
        f"machine: {cpu_name()}, {os.cpu_count()} cores; onnxruntime {ort.__version__}; {time.strftime('%Y-%m-%d')}",
        f"target {args.target} ({isa(args.target)} code); {args.rounds} round(s) of {args.seconds} s per side; "
        f"1 thread pinned to cpu {args.cpu}" + (f"; {n} threads: cores {many}" if n > 1 else ""),
        "",
    ]
    head = ["model", "ours µs (min)", "onnxruntime µs (min)", "ours / ort"]
    if n > 1:
        head += [f"ours {n}t µs (min)", f"ours {n}t speed-up", f"onnxruntime {n}t µs (min)", f"ours / ort, {n}t"]
    head += ["outputs agree", "compile s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    failed = []
    for r in rows:
        if "error" in r:
            cells = [r["model"], "failed: " + r["error"].replace("|", "\\|")] + ["-"] * (len(head) - 2)
            failed.append(f"{r['model']}: {r['error']}")
        else:
            cells = [r["model"], fmt(r, "ours"), fmt(r, "ort"), f"{r['ours_us'] / r['ort_us']:.3f}"]
            if n > 1:
                cells += [fmt(r, "ours_n"), f"{r['ours_us'] / r['ours_n_us']:.2f}x", fmt(r, "ort_n"),
                          f"{r['ours_n_us'] / r['ort_n_us']:.3f}"]
            agree = f"{'yes' if r['agree'] else 'NO'} ({r['err_over_bound']:.2g} of bound)"
            if n > 1 and not r["bits_same"]:
                agree += f"; {n}t bits differ"
                failed.append(f"{r['model']}: {n} threads give different bits from one")
            if not r["agree"]:
                failed.append(f"{r['model']}: outputs differ from onnxruntime's by {r['err_over_bound']:.3g}x the bound")
            cells += [agree, f"{r['compile_s']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    ok = [r for r in rows if "error" not in r]
    if ok:
        g1 = geomean([r["ours_us"] / r["ort_us"] for r in ok])
        cells = [f"geometric mean ({len(ok)} model{'s' if len(ok) > 1 else ''})", "", "", f"{g1:.3f}"]
        if n > 1:
            cells += ["", f"{geomean([r['ours_us'] / r['ours_n_us'] for r in ok]):.2f}x", "",
                      f"{geomean([r['ours_n_us'] / r['ort_n_us'] for r in ok]):.3f}"]
        cells += ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    b = bars(rows, args)
    if b:
        lines += ["", f"bars of issue 16, target {args.target} ({isa(args.target)}):"]
        lines += [f"{s}  {t}" for s, t in b]
    lines += [f"FAIL  {f}" for f in failed]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return failed


# ---- driver -------------------------------------------------------------------------------------

def light_dir(arg):
    d = arg or os.environ.get("XLA_AOT_ONNX_LIGHT_DIR") or os.path.join(ROOT, "target", "onnx-light")
    if not any(os.path.exists(os.path.join(d, m, f"{m}.onnx")) for m in LIGHT):
        sys.exit(f"bench: no light models in {d} (expected {d}/<arch>/<arch>.onnx for {', '.join(LIGHT)}).\n"
                 f"Write them (this replaces the directory) with\n"
                 f"    python scripts/onnx_light_models.py --out {d}\n"
                 f"in an environment with onnx 1.23.2 and onnxruntime 1.32.0 (scripts/test.sh does it once, to "
                 f"target/onnx-light), or name an existing copy with --light DIR or $XLA_AOT_ONNX_LIGHT_DIR.")
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", action="append", default=[], help="an ONNX model to time (repeatable)")
    ap.add_argument("--light", nargs="?", const="", metavar="DIR",
                    help="time onnx's nine light architectures from DIR (default: $XLA_AOT_ONNX_LIGHT_DIR, "
                         "else target/onnx-light) and print the bars of issue 16")
    ap.add_argument("--models", default="", help="comma-separated subset: built-in models (" + ",".join(BUILTIN) +
                    ") and, with --light, light architectures (" + ",".join(LIGHT) + ")")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                    help="passed to xla-aot compile for every --onnx model (repeatable)")
    ap.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N",
                    help="passed to xla-aot compile for every --onnx model (repeatable)")
    ap.add_argument("--freeze", action="append", default=[], metavar="NAME=VALUE|FILE.npy",
                    help="passed to xla-aot compile for every --onnx model; onnxruntime gets the value (repeatable)")
    ap.add_argument("--target", default="auto", help="xla-aot target (default auto: x86_64-avx512 where the "
                    "CPU has AVX-512F, else x86_64-avx2)")
    ap.add_argument("--threads", type=int, default=2, help="also time ours through the parallel-for hook and "
                    "onnxruntime with this many threads (default 2; 1: one thread only)")
    ap.add_argument("--seconds", type=float, default=1.0, help="per round and side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="core the 1-thread runs are pinned to (the N-thread "
                    "runs take N cores from here)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--markdown", help="also write the table and bars here")
    ap.add_argument("--keep", help="keep the ONNX models and libraries in this directory")
    ap.add_argument("--ort-config", action="append", default=[], metavar="KEY=VALUE",
                    help="an onnxruntime session config entry (repeatable); session.qdqisint8allowed=1 "
                    "runs int8-activation QDQ groups in its integer kernels, as it does by default on Arm "
                    "(on x86-64 it keeps them in float)")
    ap.add_argument("--xla-aot", help="the xla-aot binary (default: $XLA_AOT_EXECUTABLE, else "
                    "target/release/xla-aot, built if missing); another build's binary compares two versions")
    args = ap.parse_args()
    if args.target == "auto":
        args.target = default_target()
    if not 1 <= args.threads <= 64:
        sys.exit("bench: --threads must be 1 to 64 (bench/harness.c's pool)")
    if args.rounds < 1 or args.seconds <= 0:
        sys.exit("bench: --rounds must be at least 1 and --seconds positive")
    try:
        import numpy  # noqa: F401
        import onnx
        import onnxruntime  # noqa: F401
    except ImportError as e:
        sys.exit(f"bench: {e}; run with a Python that has numpy, onnx and onnxruntime "
                 f"(e.g. .venv/bin/python, or python3 bench/run.py ..., which makes bench/.venv)")
    xla_aot = args.xla_aot or os.environ.get("XLA_AOT_EXECUTABLE") or os.path.join(ROOT, "target", "release", "xla-aot")
    if not os.path.exists(xla_aot):
        if args.xla_aot or os.environ.get("XLA_AOT_EXECUTABLE"):
            sys.exit(f"bench: {xla_aot} does not exist")
        log("bench: building xla-aot (release)")
        run_tool("build", ["cargo", "build", "--release", "-p", "xla-aot"], cwd=ROOT)

    selected = [m for m in args.models.split(",") if m]
    for m in selected:
        if m not in BUILTIN and not (m in LIGHT and args.light is not None):
            hint = " (a light model: add --light)" if m in LIGHT else ""
            sys.exit(f"bench: unknown model {m}{hint}; built-in: {', '.join(BUILTIN)}; with --light: {', '.join(LIGHT)}")
    todo = []   # (name, path, kind)
    tmp_ctx = tempfile.TemporaryDirectory(prefix="xla-aot-onnx-")
    tmp = os.path.abspath(args.keep or tmp_ctx.name)
    os.makedirs(tmp, exist_ok=True)
    builtins = [m for m in selected if m in BUILTIN] if selected else \
        ([] if args.onnx or args.light is not None else list(BUILTIN))
    for name in builtins:
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(BUILTIN[name](name), path)
        todo.append((name, path, "builtin"))
    if args.light is not None:
        d = light_dir(args.light)
        todo += [(m, os.path.join(d, m, f"{m}.onnx"), "light") for m in LIGHT if not selected or m in selected]
    for p in args.onnx:
        name = os.path.splitext(os.path.basename(p))[0]
        while any(name == t[0] for t in todo):
            name += "_"
        todo.append((name, os.path.abspath(p), "onnx"))

    avail = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if args.cpu not in avail:
        sys.exit(f"bench: --cpu {args.cpu} is not among this process's cores {avail}")
    many = None
    if args.threads > 1 and len(avail) > args.threads:
        i = avail.index(args.cpu)
        many = {avail[(i + k) % len(avail)] for k in range(args.threads)}
    ctx = Ctx(args, xla_aot, tmp, {args.cpu}, many)
    set_affinity(ctx.one)
    log(f"bench: target {args.target} ({isa(args.target)}), compiler {xla_aot}")
    rows = []
    for name, path, kind in todo:
        log(f"bench: {name}")
        try:
            rows.append(bench_one(name, path, kind, ctx))
        except Failed as f:
            log(f"bench: {name} failed: {f}")
            rows.append({"model": name, "kind": kind, "error": str(f)})
        except Exception as e:  # a bug here, or a tool's unexpected output: report the row, go on
            log(f"bench: {name} failed: {type(e).__name__}: {e}")
            rows.append({"model": name, "kind": kind, "error": f"bench: {type(e).__name__}: {e}"})
    failed = report(rows, args, ctx)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
