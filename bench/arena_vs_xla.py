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
import subprocess
import sys
import tempfile

import numpy as np
import yaml

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402
from peers import load_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["simplenet", "mlp", "mobilenet_block", "tiny_transformer"]


def build(spec, weights):
    """A JAX function of the model's single input returning its first output."""
    f = peers.jax_model(spec, weights)
    return lambda x: f(x)[0]


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
