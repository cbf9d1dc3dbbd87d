#!/usr/bin/env python3
"""Arena size of xla-aot against XLA's temp buffer size for the same models.

For every example, this script
  1. compiles it with `xla-aot compile` and reads `arena_size` / `arena_lower_bound` from the
     manifest;
  2. builds the same model in JAX (weights from the example's safetensors file, baked in as
     constants), checks it reproduces the golden output, and asks XLA for its temp bytes:
     `jax.jit(f).lower(x).compile().memory_analysis().temp_size_in_bytes`;
  3. prints both and their ratio.

Usage (from the repository root):
    python3 -m venv .venv && .venv/bin/pip install jax jaxlib pyyaml numpy
    cargo build --release -p xla-aot
    .venv/bin/python bench/arena_vs_xla.py [--xla-aot target/release/xla-aot] [--target x86_64-avx2]

Not part of the test suite (JAX is a large download); the numbers go into docs/passes.md.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import yaml

import jax
import jax.numpy as jnp
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["simplenet", "mlp", "mobilenet_block", "tiny_transformer"]


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
    p = p or [0]
    if len(p) == 1:
        p = p * 4
    if len(p) == 2:
        p = [p[0], p[1], p[0], p[1]]
    return [(p[0], p[2]), (p[1], p[3])]


def build(spec, weights):
    """A JAX function of the model's single input (enough for the bundled examples)."""
    consts = {c["name"]: np.array(c["value"], dtype=np.float32) for c in spec.get("constants", [])}
    ops = spec["ops"]

    def f(x):
        env = {spec["inputs"][0]["name"]: x}
        env.update({k: jnp.asarray(v) for k, v in consts.items()})

        def get(n):
            return env[n] if n in env else jnp.asarray(weights[n])

        for op in ops:
            ins = [get(n) for n in op["inputs"]]
            k = op["op"]
            if k == "conv2d":
                y = lax.conv_general_dilated(
                    ins[0], ins[1], window_strides=op.get("strides", [1, 1]), padding=pads4(op.get("padding")),
                    rhs_dilation=op.get("dilations", [1, 1]), feature_group_count=op.get("groups", 1),
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
                raise SystemExit(f"bench: op {k} is not in this script's JAX builder")
            env[op["name"]] = y
        return env[spec["outputs"][0]]

    return f


def read_npy(path):
    return np.load(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xla-aot", default=os.path.join(ROOT, "target", "release", "xla-aot"))
    ap.add_argument("--target", default="x86_64-avx2")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ex in EXAMPLES:
            d = os.path.join(ROOT, "examples", ex)
            spec = yaml.safe_load(open(os.path.join(d, "model.yaml")))
            out = os.path.join(tmp, ex)
            subprocess.run([args.xla_aot, "compile", os.path.join(d, "model.yaml"), "--target", args.target,
                            "--out-dir", out], check=True, stdout=subprocess.DEVNULL)
            manifest = json.load(open(os.path.join(out, f"{ex}.json")))
            weights = load_safetensors(os.path.join(d, "weights.safetensors"))
            f = build(spec, weights)
            x = read_npy(os.path.join(d, "golden", "inputs", "x.npy"))
            want = read_npy(os.path.join(d, "golden", "expected", f"{spec['outputs'][0]}.npy"))
            got = np.asarray(jax.jit(f)(x))
            err = float(np.max(np.abs(got - want)))
            assert err < 1e-4, f"{ex}: the JAX model differs from the golden output by {err}"
            mem = jax.jit(f).lower(x).compile().memory_analysis()
            rows.append((ex, manifest["arena_size"], manifest["arena_lower_bound"], mem.temp_size_in_bytes, err))
    print(f"jax {jax.__version__}, xla-aot target {args.target}")
    print(f"{'model':<18} {'xla-aot arena':>14} {'lower bound':>12} {'XLA temp':>10} {'ratio':>7}")
    for ex, arena, lb, temp, _ in rows:
        ratio = arena / temp if temp else float("nan")
        print(f"{ex:<18} {arena:>14} {lb:>12} {temp:>10} {ratio:>7.3f}")
    worse = [r[0] for r in rows if r[1] > r[3]]
    print("arena <= XLA temp bytes on every model" if not worse else f"arena larger than XLA's on: {', '.join(worse)}")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
