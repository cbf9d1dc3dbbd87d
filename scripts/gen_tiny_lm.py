#!/usr/bin/env python3
"""Write the weights of examples/tiny_lm (a 2-block decoder-only language model step).

The weights are drawn from np.random.default_rng(TINY_LM_SEED) in a fixed order (sorted
tensor names), scaled like a trained model's (normal / sqrt(fan_in)); the token embedding
and the output head are scaled up so that sampling has a peaked but not degenerate
distribution to draw from. The model itself (examples/tiny_lm/model.yaml) is hand-written.

Usage:
    .venv/bin/python scripts/gen_tiny_lm.py           # (re)write examples/tiny_lm/weights.safetensors
    .venv/bin/python scripts/gen_tiny_lm.py --check   # regenerate in memory and compare bytes
Requires numpy only.
"""

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import write_safetensors  # noqa: E402

TINY_LM_SEED = 20261201
LAYERS, HEADS, HEAD_DIM, VOCAB, MAX_SEQ, FF = 2, 2, 16, 64, 64, 64
D = HEADS * HEAD_DIM


def shapes():
    s = {"tok.weight": (VOCAB, D), "pos.weight": (MAX_SEQ, D), "ln_f.gamma": (D,),
         "ln_f.beta": (D,), "head.weight": (VOCAB, D)}
    for l in range(LAYERS):
        p = f"b{l}"
        for w in "qko" + "v":
            s[f"{p}.{w}.weight"] = (D, D)
            s[f"{p}.{w}.bias"] = (D,)
        s[f"{p}.ln1.gamma"] = s[f"{p}.ln2.gamma"] = (D,)
        s[f"{p}.ln1.beta"] = s[f"{p}.ln2.beta"] = (D,)
        s[f"{p}.ff1.weight"], s[f"{p}.ff1.bias"] = (FF, D), (FF,)
        s[f"{p}.ff2.weight"], s[f"{p}.ff2.bias"] = (D, FF), (D,)
    return s


def weights():
    rng = np.random.default_rng(TINY_LM_SEED)
    out = {}
    for name, shape in sorted(shapes().items()):
        if name.endswith(".gamma"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".beta") or name.endswith(".bias"):
            w = 0.02 * rng.standard_normal(shape)
        elif name in ("tok.weight", "pos.weight"):
            w = rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
            if name == "head.weight":
                w *= 3.0
        out[name] = w.astype(np.float32)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "examples", "tiny_lm", "weights.safetensors")
    if args.check:
        with tempfile.TemporaryDirectory() as d:
            tmp = os.path.join(d, "w.safetensors")
            write_safetensors(tmp, weights())
            same = open(tmp, "rb").read() == open(path, "rb").read()
        print("examples/tiny_lm/weights.safetensors", "is current" if same else "is STALE")
        sys.exit(0 if same else 1)
    write_safetensors(path, weights())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
