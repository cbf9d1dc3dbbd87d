#!/usr/bin/env python3
"""Export small JAX functions and the four bundled examples as XLA HLO text with golden data.

For every case this writes (paths relative to the repository root):

* tests/jax/<case>/model.hlo.txt   the text of jax.jit(f).lower(*args).as_text(dialect="hlo"),
                                   exactly as JAX printed it
* tests/jax/<case>/input_<i>.npy   the runtime inputs, in entry-parameter order ('<f4' / '<i4');
                                   parameters bound to weights are not among them
* tests/jax/<case>/output_<i>.npy  JAX's (XLA CPU's) outputs, in the order of the ROOT tuple
                                   (a single output_0.npy for a non-tuple result);
                                   '<f4', '<i4' or '|b1'
* tests/jax/<case>/spec.yaml       examples only: `graph: {hlo: model.hlo.txt}` plus
                                   `params: ../../../examples/<ex>/weights.safetensors`
* tests/jax/README.md              what is there (cases, opcodes, dropped cases, versions)

Examples (simplenet, mlp, mobilenet_block, tiny_transformer) are reimplemented from
examples/<ex>/model.yaml in jax.numpy/lax; each weight is a separate positional parameter of the
JAX function. XLA's HLO naming turns a '.' in a name into '_' (it reserves '.N' for its own
uniquing suffix), so the safetensors key `conv.weight` appears as the entry parameter
`conv_weight.N`: an HLO parameter binds the weight whose key, with every '.' replaced by '_',
equals the parameter name without its `.N` suffix. The script checks that this mapping is
injective for every example, and checks JAX's outputs against examples/<ex>/golden/expected
(max |diff| <= 1e-4 * max |expected|).

Every case's HLO must use only the opcodes in ALLOWED_OPCODES and contain no elided constant
(`{...}`); a case that does not is reported and dropped (listed in the README).

Deterministic: inputs come from np.random.default_rng(SEED_BASE + crc32(case name)).

Usage (the bench venv has jax):
    bench/.venv/bin/python scripts/export_jax.py           # (re)write tests/jax in place
    bench/.venv/bin/python scripts/export_jax.py --check   # regenerate into a temp dir, compare

--check compares every file byte for byte and exits 1 on any difference, missing or stale file.
"""

import argparse
import inspect
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import zlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "")

import numpy as np  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
import jaxlib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join("tests", "jax")
SEED_BASE = 20240601
EXAMPLES = ["simplenet", "mlp", "mobilenet_block", "tiny_transformer"]
EXAMPLE_RTOL = 1e-4

ALLOWED_OPCODES = {
    "parameter", "constant", "tuple", "get-tuple-element", "call", "convolution", "dot",
    "reduce", "reduce-window", "broadcast", "reshape", "transpose", "slice", "dynamic-slice",
    "concatenate", "pad", "select", "compare", "iota", "convert", "clamp", "add", "subtract",
    "multiply", "divide", "maximum", "minimum", "power", "exponential", "log", "tanh",
    "logistic", "rsqrt", "sqrt", "erf", "negate", "abs", "and", "or", "not",
}


# ----------------------------------------------------------------------------------------
# HLO text helpers
# ----------------------------------------------------------------------------------------

def hlo_opcodes(text):
    """The set of opcodes of every instruction in an HLO module's text."""
    ops = set()
    for line in text.splitlines():
        line = line.strip()
        if " = " not in line or line.startswith("HloModule"):
            continue
        if line.startswith("ROOT "):
            line = line[5:]
        rest = line.split(" = ", 1)[1]
        if rest.startswith("("):  # tuple shape, possibly nested
            depth = 0
            for i, ch in enumerate(rest):
                depth += ch == "("
                depth -= ch == ")"
                if depth == 0:
                    break
            rest = rest[i + 1:].lstrip()
        else:
            rest = rest.split(" ", 1)[1]
        m = re.match(r"([a-z][a-z0-9-]*)\(", rest)
        assert m, line
        ops.add(m.group(1))
    return ops


def entry_parameters(text):
    """[(index, name)] of the ENTRY computation's parameters, sorted by index."""
    entry = text[text.index("\nENTRY "):]
    params = re.findall(r"^\s*(\S+) = \S+ parameter\((\d+)\)", entry, re.M)
    return sorted((int(i), n) for n, i in params)


def strip_suffix(name):
    return re.sub(r"\.\d+$", "", name)


# ----------------------------------------------------------------------------------------
# cases: (name, function, inputs) — inputs are numpy arrays, one per function argument
# ----------------------------------------------------------------------------------------

def rng_for(name):
    return np.random.default_rng(SEED_BASE + zlib.crc32(name.encode()))


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def normal(r, *shape, scale=1.0):
    return f32(r.standard_normal(shape) * scale)


def positive(r, *shape, lo=0.5, hi=2.0):
    return f32(r.uniform(lo, hi, shape))


def conv(x, w, strides, padding, dn, rhs_dilation=None, groups=1):
    return lax.conv_general_dilated(x, w, window_strides=strides, padding=padding,
                                    rhs_dilation=rhs_dilation, dimension_numbers=dn,
                                    feature_group_count=groups)


def avg_pool_nchw(x, k, s, padding):
    window, strides = (1, 1) + k, (1, 1) + s
    total = lax.reduce_window(x, 0.0, lax.add, window, strides, padding)
    count = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, window, strides, padding)
    return total / count


def layer_norm(x, g, b, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * g + b


def gelu_exact(x):
    """0.5·x·(1 + erf(x/√2)) with lax.erf (one `erf` instruction)."""
    return 0.5 * x * (1.0 + lax.erf(x * np.float32(1 / np.sqrt(2))))


def op_cases():
    """Every op case as (name, python function, [numpy inputs])."""
    cases = []

    def case(name, *shapes_or_arrays):
        def register(fn):
            r = rng_for(name)
            args = [a(r) if callable(a) else a for a in shapes_or_arrays]
            cases.append((name, fn, args))
            return fn
        return register

    N = lambda *s, scale=1.0: (lambda r: normal(r, *s, scale=scale))  # noqa: E731
    P = lambda *s: (lambda r: positive(r, *s))  # noqa: E731

    # --- elementwise ---------------------------------------------------------------------
    @case("relu", N(4, 8))
    def relu(x):
        return jax.nn.relu(x)

    @case("relu6", N(4, 8, scale=4.0))
    def relu6(x):
        return jax.nn.relu6(x)

    @case("gelu_tanh", N(4, 8, scale=2.0))
    def gelu_tanh(x):
        return jax.nn.gelu(x, approximate=True)

    @case("gelu_erf", N(4, 8, scale=2.0))
    def gelu_erf(x):
        return gelu_exact(x)

    @case("gelu_jax_nn_exact", N(4, 8, scale=2.0))
    def gelu_jax_nn_exact(x):
        # jax.nn.gelu(approximate=False) goes through erfc, which JAX expands into polynomials
        return jax.nn.gelu(x, approximate=False)

    @case("sigmoid", N(4, 8, scale=3.0))
    def sigmoid(x):
        return jax.nn.sigmoid(x)

    @case("silu", N(4, 8, scale=3.0))
    def silu(x):
        return jax.nn.silu(x)

    @case("softplus", N(4, 8, scale=3.0))
    def softplus(x):
        return jax.nn.softplus(x)

    @case("softplus_explicit", N(4, 8, scale=3.0))
    def softplus_explicit(x):
        return jnp.log(1.0 + jnp.exp(x))

    @case("tanh", N(4, 8, scale=2.0))
    def tanh(x):
        return jnp.tanh(x)

    @case("exp", N(4, 8))
    def exp(x):
        return jnp.exp(x)

    @case("log", P(4, 8))
    def log(x):
        return jnp.log(x)

    @case("sqrt", P(4, 8))
    def sqrt(x):
        return jnp.sqrt(x)

    @case("rsqrt", P(4, 8))
    def rsqrt(x):
        return lax.rsqrt(x)

    @case("erf", N(4, 8))
    def erf(x):
        return jax.scipy.special.erf(x)

    @case("power", P(4, 8), N(4, 8))
    def power(x, y):
        return x ** y

    @case("integer_power", N(4, 8))
    def integer_power(x):
        return x ** 3

    @case("maximum_minimum", N(4, 8), N(1, 8))
    def maximum_minimum(x, y):
        return jnp.maximum(x, y), jnp.minimum(x, y)

    @case("abs_negate", N(4, 8))
    def abs_negate(x):
        return jnp.abs(x), -x

    @case("clip", N(4, 8))
    def clip(x):
        return jnp.clip(x, -0.5, 0.75)

    @case("lax_clamp", N(4, 8))
    def lax_clamp(x):
        return lax.clamp(-0.5, x, 0.75)

    @case("leaky_where", N(4, 8))
    def leaky_where(x):
        return jnp.where(x > 0, x, 0.1 * x)

    @case("arith_broadcast", N(2, 3, 4), P(3, 1), N(4))
    def arith_broadcast(x, y, z):
        return (x + z) * y - z / y

    # --- softmax and reductions ----------------------------------------------------------
    @case("softmax_axis1", N(3, 10, scale=2.0))
    def softmax_axis1(x):
        return jax.nn.softmax(x, axis=-1)

    @case("softmax_axis0", N(5, 4, scale=2.0))
    def softmax_axis0(x):
        return jax.nn.softmax(x, axis=0)

    @case("log_softmax", N(3, 10, scale=2.0))
    def log_softmax(x):
        return jax.nn.log_softmax(x, axis=-1)

    @case("reduce_sum_mean", N(2, 3, 4))
    def reduce_sum_mean(x):
        return (jnp.sum(x, axis=1), jnp.sum(x), jnp.mean(x, axis=(0, 2)),
                jnp.mean(x, axis=-1, keepdims=True))

    @case("reduce_max_min", N(2, 3, 4))
    def reduce_max_min(x):
        return (jnp.max(x, axis=2), jnp.min(x, axis=0), jnp.max(x, axis=(1, 2), keepdims=True),
                jnp.min(x))

    @case("argmax_axis1", N(3, 7))
    def argmax_axis1(x):
        return jnp.argmax(x, axis=1)

    # --- linear algebra ------------------------------------------------------------------
    @case("matmul_2d", N(3, 5), N(5, 4))
    def matmul_2d(x, y):
        return x @ y

    @case("batched_matmul", N(2, 3, 5), N(2, 5, 4))
    def batched_matmul(a, b):
        return jnp.einsum("bij,bjk->bik", a, b)

    @case("dense", N(2, 6), N(6, 4), N(4))
    def dense(x, w, b):
        return x @ w + b

    # --- convolution and pooling ---------------------------------------------------------
    @case("conv_nchw_stride2", N(2, 3, 8, 8), N(4, 3, 3, 3))
    def conv_nchw_stride2(x, w):
        return conv(x, w, (2, 2), ((1, 1), (1, 1)), ("NCHW", "OIHW", "NCHW"))

    @case("conv_nchw_bias_asym_pad", N(1, 2, 7, 6), N(3, 2, 3, 2), N(3))
    def conv_nchw_bias_asym_pad(x, w, b):
        y = conv(x, w, (1, 2), ((0, 2), (1, 0)), ("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    @case("conv_nhwc", N(2, 8, 8, 3), N(3, 3, 3, 4))
    def conv_nhwc(x, w):
        return conv(x, w, (1, 1), "SAME", ("NHWC", "HWIO", "NHWC"))

    @case("conv_depthwise", N(1, 4, 6, 6), N(4, 1, 3, 3))
    def conv_depthwise(x, w):
        return conv(x, w, (1, 1), ((1, 1), (1, 1)), ("NCHW", "OIHW", "NCHW"), groups=4)

    @case("conv_dilated", N(1, 2, 9, 9), N(3, 2, 3, 3))
    def conv_dilated(x, w):
        return conv(x, w, (1, 1), "VALID", ("NCHW", "OIHW", "NCHW"), rhs_dilation=(2, 2))

    @case("max_pool_2x2", N(2, 3, 8, 8))
    def max_pool_2x2(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    @case("max_pool_3x3_same", N(1, 2, 5, 5))
    def max_pool_3x3_same(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 1, 1), "SAME")

    @case("avg_pool_2x2", N(2, 3, 8, 8))
    def avg_pool_2x2(x):
        return avg_pool_nchw(x, (2, 2), (2, 2), "VALID")

    @case("avg_pool_3x3_same", N(1, 2, 5, 5))
    def avg_pool_3x3_same(x):
        return avg_pool_nchw(x, (3, 3), (1, 1), "SAME")

    @case("layer_norm", N(2, 3, 8, scale=2.0), N(8), N(8))
    def layer_norm_case(x, gamma, beta):
        return layer_norm(x, gamma, beta)

    # --- shape ops -----------------------------------------------------------------------
    @case("transpose", N(2, 3, 4, 5))
    def transpose(x):
        return jnp.transpose(x, (0, 2, 3, 1)), x.T

    @case("reshape", N(2, 3, 4))
    def reshape(x):
        return x.reshape(6, 4), x.reshape(2, 12)

    @case("six_outputs", N(2, 3))
    def six_outputs(x):
        # a ROOT tuple of more than 5 elements: XLA prints /*index=5*/ inside the tuple
        return x + 1.0, x * 2.0, x - 3.0, x / 4.0, -x, jnp.abs(x)

    @case("concatenate", N(2, 3), N(2, 5), N(2, 1))
    def concatenate(x, y, z):
        return jnp.concatenate([x, y, z], axis=1)

    @case("pad", N(2, 3))
    def pad(x):
        return jnp.pad(x, ((1, 0), (2, 3))), jnp.pad(x, ((0, 2), (1, 1)), constant_values=1.5)

    @case("slice", N(4, 6))
    def slice_case(x):
        return x[:, 1:3], x[1:, -2:]

    @case("strided_slice", N(7, 6))
    def strided_slice(x):
        return x[::2], x[1:6:3, ::4]

    @case("dynamic_slice", N(5, 6))
    def dynamic_slice(x):
        # constant start indices: JAX emits a plain `slice`
        return lax.dynamic_slice(x, (1, 2), (3, 3))

    @case("dynamic_slice_runtime", N(5, 6), lambda r: np.int32(4))
    def dynamic_slice_runtime(x, i):
        # a start index past the end is clamped by dynamic-slice: rows 2..4
        return lax.dynamic_slice(x, (i, 2), (3, 3))

    @case("iota_add", N(3, 5))
    def iota_add(x):
        return jnp.arange(5, dtype=jnp.float32) + x

    @case("convert", N(3, 4, scale=3.0))
    def convert(x):
        i = x.astype(jnp.int32)
        return i, i.astype(jnp.float32) * 0.5

    @case("convert_i32_input", lambda r: r.integers(-10, 10, (3, 4)).astype(np.int32))
    def convert_i32_input(k):
        return k.astype(jnp.float32) * 0.25

    @case("compare_gt", N(3, 4), N(3, 4))
    def compare_gt(x, y):
        return x > y

    @case("logical", N(3, 4), N(3, 4))
    def logical(x, y):
        return ((x > 0) & (y < 0)) | ~(x > y)

    return cases


# ----------------------------------------------------------------------------------------
# examples
# ----------------------------------------------------------------------------------------

def load_safetensors(path):
    """{name: np.ndarray} of a .safetensors file (F32 only), in file order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[base + lo:base + hi], dtype="<f4").reshape(info["shape"])
    return out


def load_npy_dir(d):
    return {os.path.splitext(f)[0]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))}


def bn(x, w, p, eps=1e-5):
    g, b, m, v = (w[p + s] for s in (".gamma", ".beta", ".mean", ".var"))
    sh = (1, -1) + (1,) * (x.ndim - 2)
    return (x - m.reshape(sh)) / jnp.sqrt(v.reshape(sh) + eps) * g.reshape(sh) + b.reshape(sh)


def dense_t(x, w, b):
    return x @ w.T + b


def conv2d_nchw(x, w, stride=(1, 1), pad=0, groups=1):
    return conv(x, w, stride, ((pad, pad), (pad, pad)), ("NCHW", "OIHW", "NCHW"), groups=groups)


def simplenet(x, w):
    y = conv2d_nchw(x, w["conv.weight"], pad=1) + w["conv.bias"][None, :, None, None]
    return jax.nn.relu(bn(y, w, "bn"))


def mlp(x, w):
    h = jax.nn.relu(dense_t(x, w["fc1.weight"], w["fc1.bias"]))
    h = jax.nn.relu(dense_t(h, w["fc2.weight"], w["fc2.bias"]))
    return jax.nn.softmax(dense_t(h, w["fc3.weight"], w["fc3.bias"]), axis=-1)


def mobilenet_block(x, w):
    h = jax.nn.relu6(bn(conv2d_nchw(x, w["conv1.weight"], (2, 2), 1), w, "bn1"))
    h = jax.nn.relu6(bn(conv2d_nchw(h, w["dw.weight"], pad=1, groups=16), w, "bn2"))
    h = jax.nn.relu6(bn(conv2d_nchw(h, w["pw.weight"]), w, "bn3"))
    gap = jnp.mean(h, axis=(2, 3), keepdims=True)
    flat = gap.reshape(gap.shape[0], -1)
    return jax.nn.softmax(dense_t(flat, w["fc.weight"], w["fc.bias"]), axis=-1)


def tiny_transformer(x, w):
    def heads(t):
        return jnp.transpose(t.reshape(1, 32, 4, 16), (0, 2, 1, 3))

    ln1 = layer_norm(x, w["ln1.gamma"], w["ln1.beta"])
    q = heads(dense_t(ln1, w["q.weight"], w["q.bias"]))
    k = heads(dense_t(ln1, w["k.weight"], w["k.bias"]))
    v = heads(dense_t(ln1, w["v.weight"], w["v.bias"]))
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * 0.25
    attn = jax.nn.softmax(scores, axis=-1)
    ctx = jnp.transpose(jnp.matmul(attn, v), (0, 2, 1, 3)).reshape(1, 32, 64)
    h = x + dense_t(ctx, w["attn_out.weight"], w["attn_out.bias"])
    ln2 = layer_norm(h, w["ln2.gamma"], w["ln2.beta"])
    act = gelu_exact(dense_t(ln2, w["ff1.weight"], w["ff1.bias"]))
    return h + dense_t(act, w["ff2.weight"], w["ff2.bias"])


EXAMPLE_FNS = {"simplenet": simplenet, "mlp": mlp, "mobilenet_block": mobilenet_block,
               "tiny_transformer": tiny_transformer}


def yaml_inputs_outputs_weights(path):
    """(input names, output names, weight names in order of first use) of a bundled model.yaml.

    The bundled specs are written one flow mapping per line by gen_golden.py; this reads just
    what is needed without a YAML library.
    """
    text = open(path).read()
    inputs = re.findall(r"^\s*- \{name: (\w+), dtype:", text, re.M)
    outputs = [s.strip() for s in re.search(r"^outputs: \[(.*)\]", text, re.M).group(1).split(",")]
    defined = set(inputs) | set(re.findall(r"^\s*- \{name: (\w+), value:", text, re.M))
    weights = []
    for m in re.finditer(r"^\s*- \{name: (\w+), *op: \w+, inputs: \[([^\]]*)\]", text, re.M):
        for t in (s.strip() for s in m.group(2).split(",")):
            if t not in defined and t not in weights:
                weights.append(t)
        defined.add(m.group(1))
    return inputs, outputs, weights


def named_function(name, arg_names, body):
    """A function called `name` whose (positional) parameters are called `arg_names`.

    jax.jit names the HLO module jit_<name> and its entry parameters after these names.
    """
    def fn(*args):
        return body(*args)
    fn.__name__ = fn.__qualname__ = name
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in arg_names])
    return fn


def example_case(root, ex):
    """(name, fn, all args, number of runtime inputs, weight names, expected outputs)."""
    d = os.path.join(root, "examples", ex)
    inputs, outputs, wnames = yaml_inputs_outputs_weights(os.path.join(d, "model.yaml"))
    weights = load_safetensors(os.path.join(d, "weights.safetensors"))
    assert set(wnames) <= set(weights), (ex, set(wnames) - set(weights))
    hlo_names = [n.replace(".", "_") for n in wnames]
    assert len(set(hlo_names) | set(inputs)) == len(wnames) + len(inputs), (ex, "name clash")
    for n in hlo_names:
        assert n.isidentifier(), (ex, n)
    gin = load_npy_dir(os.path.join(d, "golden", "inputs"))
    gexp = load_npy_dir(os.path.join(d, "golden", "expected"))
    model = EXAMPLE_FNS[ex]
    ni = len(inputs)

    def body(*args):
        w = dict(zip(wnames, args[ni:]))
        y = model(*args[:ni], w)
        return y if len(outputs) == 1 else tuple(y)

    fn = named_function(ex, inputs + hlo_names, body)
    args = [f32(gin[n]) for n in inputs] + [weights[n] for n in wnames]
    return ex, fn, args, ni, wnames, [gexp[n] for n in outputs]


# ----------------------------------------------------------------------------------------
# export
# ----------------------------------------------------------------------------------------

def save_npy(path, a):
    a = np.asarray(a)
    if a.dtype == np.float32:
        a = a.astype("<f4")
    elif a.dtype == np.int32:
        a = a.astype("<i4")
    elif a.dtype == np.bool_:
        pass
    else:
        raise AssertionError(f"{path}: unexpected dtype {a.dtype}")
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a.copy(order="C"), version=(1, 0), allow_pickle=False)


def lower(fn, args):
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    outs = jax.jit(fn)(*args)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    return text, [np.asarray(o) for o in outs]


def write_case(out_root, name, text, inputs, outputs, spec=None):
    d = os.path.join(out_root, name)
    os.makedirs(d)
    with open(os.path.join(d, "model.hlo.txt"), "w", newline="\n") as f:
        f.write(text)
    for i, a in enumerate(inputs):
        save_npy(os.path.join(d, f"input_{i}.npy"), a)
    for i, a in enumerate(outputs):
        save_npy(os.path.join(d, f"output_{i}.npy"), a)
    if spec is not None:
        with open(os.path.join(d, "spec.yaml"), "w", newline="\n") as f:
            f.write(spec)


def describe(arrays):
    return ", ".join(f"{a.dtype.str}{list(a.shape)}" for a in arrays)


def problems_of(text):
    ops = hlo_opcodes(text)
    bad = sorted(ops - ALLOWED_OPCODES)
    why = []
    if bad:
        why.append("opcodes outside the supported set: " + ", ".join(bad))
    if "{...}" in text:
        why.append("an elided constant `{...}`")
    return ops, why


def generate(out_root, root):
    """Write every case under out_root (which must not exist); returns False on a failed check."""
    os.makedirs(out_root)
    ok = True
    rows, dropped, all_ops, ex_rows = [], [], set(), []

    for name, fn, args in op_cases():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), name
        text, outs = lower(fn, args)
        ops, why = problems_of(text)
        print(f"{name:26s} {' '.join(sorted(ops))}")
        if why:
            print(f"  DROPPED {name}: {'; '.join(why)}")
            dropped.append((name, "; ".join(why)))
            continue
        params = entry_parameters(text)
        assert [i for i, _ in params] == list(range(len(args))), (name, params)
        all_ops |= ops
        write_case(out_root, name, text, args, outs)
        rows.append((name, describe(args), describe(outs), ops))

    for ex in EXAMPLES:
        name, fn, args, ni, wnames, expected = example_case(root, ex)
        text, outs = lower(fn, args)
        ops, why = problems_of(text)
        print(f"{name:26s} {' '.join(sorted(ops))}")
        if why:
            print(f"  ERROR {name}: {'; '.join(why)}")
            ok = False
            continue
        params = entry_parameters(text)
        assert [i for i, _ in params] == list(range(len(args))), (name, params)
        pnames = [strip_suffix(n) for _, n in params]
        for w, p in zip(wnames, pnames[ni:]):
            assert p == w.replace(".", "_"), (name, w, p)
        print(f"  parameters: {' '.join(n for _, n in params)}")
        for i, (o, e) in enumerate(zip(outs, expected)):
            assert o.shape == e.shape and o.dtype == e.dtype, (name, i, o.shape, e.shape)
            err = float(np.max(np.abs(o.astype(np.float64) - e))) / float(np.max(np.abs(e)))
            verdict = "ok" if err <= EXAMPLE_RTOL else "MISMATCH"
            print(f"  output {i}: max |jax - golden| / max |golden| = {err:.3g} ({verdict})")
            ok &= err <= EXAMPLE_RTOL
        all_ops |= ops
        spec = (f"name: {name}\ngraph: {{hlo: model.hlo.txt}}\n"
                f"params: ../../../examples/{ex}/weights.safetensors\n")
        write_case(out_root, name, text, args[:ni], outs, spec)
        ex_rows.append((name, describe(args[:ni]), describe(outs), ops,
                        [n for _, n in params], wnames))

    with open(os.path.join(out_root, "README.md"), "w", newline="\n") as f:
        f.write(readme(rows, ex_rows, dropped, all_ops))
    print(f"opcodes overall: {' '.join(sorted(all_ops))}")
    return ok


NOTES = """\
Observed in these files (jax 0.10.2), worth knowing when parsing them:

- No `metadata=`, `frontend_attributes=`, `sharding=` or `backend_config=` (JAX prints with
  `HloPrintOptions.short_parsable()` and `print_metadata = False`), and no elided `{...}` constant.
- `HloModule jit_<fn>, entry_computation_layout={(...)->...}`; the ENTRY computation is
  `main.N`. Shape lists longer than five elements carry `/*index=5*/`, `/*index=10*/` comments,
  in `entry_computation_layout` and in tuple shapes (`six_outputs`: the ROOT tuple's shape), not
  in operand lists.
- Entry parameters are named after the Python arguments with a `.N` suffix (`x.1`); a `.` in a
  name becomes `_`. Parameters are printed where first used, not in `parameter(i)` order
  (see `mlp`: `parameter(2)` comes after the first `dot`); inside reduce regions the parameters
  also appear out of order (`argmax_axis1`: 0, 2, 1, 3).
- Every shape has a layout. Intermediate `transpose` results, and in `transpose` even the entry
  result layout, are non-row-major (`f32[784,512]{0,1}`, `f32[2,4,5,3]{2,1,3,0}`); the values
  (and the `.npy` outputs) are logical arrays, so layouts can be ignored.
- Instruction names follow the JAX primitive, not the opcode (`broadcast_in_dim.5 = ... reshape(...)`,
  `erfc.177 = ... abs(...)`, `select_n.1`, `jit_relu_.2 = ... call(...)`); computation names can
  start with `_` (`_pad.1`).
- Non-entry computations: `region_N.M` (reducers), and `call`ed ones named after jitted JAX
  helpers (`relu.1`, `relu6.1` and `relu6_0.2` for a second shape, `silu`, `clip`, `_where`,
  `_pad`, `log_softmax`, `argmax.2`). The ROOT is always the
  last instruction of a computation. Dead instructions occur (`argmax`: an unused
  `get-tuple-element`).
- Literals: `constant(0)` and `constant(1)` for f32 (no decimal point), `constant(1e-05)`,
  `constant(0.707106769)`, `constant(-inf)`, `constant(inf)`, and rank-1 literals such as
  `f32[1]{0} constant({-inf})` (softmax).
- Attributes seen: `dimensions={...}` (broadcast, reduce, transpose), `to_apply=`,
  `direction=GT|LT|EQ|NE|...`, `iota_dimension=`, `index=`, `slice={[0:7:2], [0:6:1]}` (the stride
  is printed for every dimension once any is not 1, `{[1:4], [2:5]}` otherwise),
  `dynamic_slice_sizes={3,3}`, `padding=1_0x2_3` (pad: low_high per dim, `x`-separated),
  `window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=2x2}`, `dim_labels=bf01_oi01->bf01` /
  `b01f_01io->b01f`, `feature_group_count=`, `lhs_batch_dims= lhs_contracting_dims=
  rhs_batch_dims= rhs_contracting_dims=`.
- Variadic `reduce` (argmax): `(f32[3]{0}, s32[3]{0}) reduce(x, iota, init0, init1)` with a
  tuple-returning region, unpacked by `get-tuple-element`.
- `jnp.pad` with the default value passes an `s32[] constant(0)` to a called computation that
  `convert`s it to f32; a constant-index `lax.dynamic_slice` becomes a plain `slice` (the
  runtime-index case keeps `dynamic-slice`, with JAX's negative-index wrap around it).
"""


def readme(rows, ex_rows, dropped, all_ops):
    L = []
    L.append("# JAX-exported HLO text test cases\n")
    L.append("Generated by `scripts/export_jax.py`; do not edit. Regenerate with\n")
    L.append("    bench/.venv/bin/python scripts/export_jax.py          # rewrite tests/jax")
    L.append("    bench/.venv/bin/python scripts/export_jax.py --check  # compare, exit 1 on a difference\n")
    L.append(f"Generated with jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
             f"numpy {np.__version__}, on the CPU backend (`jax_enable_x64` off).\n")
    L.append("Each `<case>/` holds")
    L.append("- `model.hlo.txt`: `jax.jit(f).lower(*args).as_text(dialect=\"hlo\")`, exactly as printed;")
    L.append("- `input_<i>.npy`: the runtime inputs in entry-parameter order (`<f4`, `<i4`);")
    L.append("- `output_<i>.npy`: JAX's outputs (XLA CPU) in the order of the ROOT tuple, or one "
             "`output_0.npy` for a non-tuple result (`<f4`, `<i4`, `|b1` for pred);")
    L.append("- examples only: `spec.yaml` (`graph: {hlo: model.hlo.txt}`, `params:` the example's "
             "`weights.safetensors`).\n")
    L.append("## Op cases\n")
    L.append("| case | inputs | outputs | opcodes |")
    L.append("|---|---|---|---|")
    for name, i, o, ops in rows:
        L.append(f"| `{name}` | {i} | {o} | {' '.join(sorted(ops))} |")
    L.append("")
    L.append("## Examples\n")
    L.append("The four bundled examples, reimplemented in jax.numpy/lax from `examples/<ex>/model.yaml`;")
    L.append("inputs are `examples/<ex>/golden/inputs`, and the outputs match")
    L.append(f"`examples/<ex>/golden/expected` within {EXAMPLE_RTOL:g} of max |expected|. Each weight is")
    L.append("a separate entry parameter. XLA's HLO naming replaces `.` by `_` (it keeps `.N` for its")
    L.append("uniquing suffix), so the weight `conv.weight` is the parameter `conv_weight.N`: a parameter")
    L.append("binds the weight whose key with every `.` replaced by `_` equals the parameter's name")
    L.append("without `.N` (no two keys of an example collide under that mapping).\n")
    L.append("| case | runtime inputs | outputs | entry parameters (in order) | opcodes |")
    L.append("|---|---|---|---|---|")
    for name, i, o, ops, params, _ in ex_rows:
        L.append(f"| `{name}` | {i} | {o} | {' '.join('`' + p + '`' for p in params)} | "
                 f"{' '.join(sorted(ops))} |")
    L.append("")
    L.append("## What the HLO text looks like\n")
    L.append(NOTES)
    L.append("## Dropped cases\n")
    if dropped:
        L.append("These use something outside the supported opcode set or contain an elided "
                 "constant, and are not written:\n")
        for name, why in dropped:
            L.append(f"- `{name}`: {why}")
    else:
        L.append("None.")
    L.append("")
    L.append("## Opcodes used overall\n")
    L.append(" ".join(f"`{o}`" for o in sorted(all_ops)))
    L.append("")
    return "\n".join(L)


def compare_trees(expected_root, actual_root):
    def files(r):
        out = set()
        for dp, _, fs in os.walk(r):
            for f in fs:
                out.add(os.path.relpath(os.path.join(dp, f), r))
        return out

    a, b = files(expected_root), files(actual_root)
    bad = 0
    for p in sorted(a - b):
        print(f"stale (not generated): {OUT_DIR}/{p}")
        bad += 1
    for p in sorted(b - a):
        print(f"missing: {OUT_DIR}/{p}")
        bad += 1
    for p in sorted(a & b):
        x = open(os.path.join(expected_root, p), "rb").read()
        y = open(os.path.join(actual_root, p), "rb").read()
        if x != y:
            msg = ""
            if p.endswith(".npy"):
                try:
                    u = np.load(os.path.join(expected_root, p))
                    v = np.load(os.path.join(actual_root, p))
                    if u.shape == v.shape and u.dtype == v.dtype:
                        msg = f" (max |diff| {np.max(np.abs(u.astype(np.float64) - v)):.3g})"
                    else:
                        msg = f" ({u.dtype}{u.shape} vs {v.dtype}{v.shape})"
                except Exception as e:  # noqa: BLE001
                    msg = f" ({e})"
            print(f"differs: {OUT_DIR}/{p}{msg}")
            bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temp dir and compare with tests/jax (exit 1 on a difference)")
    ap.add_argument("--root", default=REPO, help="repository root (default: this script's)")
    args = ap.parse_args()
    dest = os.path.join(args.root, OUT_DIR)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "jax")
            ok = generate(out, args.root)
            bad = compare_trees(dest, out)
        if bad or not ok:
            print(f"check FAILED: {bad} file(s) differ" + ("" if ok else "; an example failed"))
            return 1
        print("check ok: tests/jax is up to date")
        return 0
    with tempfile.TemporaryDirectory(dir=os.path.join(args.root, "tests")) as tmp:
        out = os.path.join(tmp, "jax")
        ok = generate(out, args.root)
        if not ok:
            print("FAILED: an example does not match its golden data; tests/jax left unchanged")
            return 1
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.rename(out, dest)
    print(f"wrote {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
