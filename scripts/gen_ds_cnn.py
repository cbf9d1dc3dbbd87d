#!/usr/bin/env python3
"""Write the weights of examples/ds_cnn (a keyword-spotting DS-CNN, ARM's "DS-CNN-S" shape).

49x10 MFCC features in, 12 classes out: a 10x4 stride-2 convolution to 64 channels, four
depthwise-separable blocks (3x3 depthwise, 1x1 pointwise, 64 channels, batch norm and ReLU after
each), global average pooling and a dense layer: 22 092 parameters (24 396 with the batch-norm
statistics, which fold into the convolutions), the size of the models microcontroller keyword
spotters run. The weights are drawn from
np.random.default_rng(DS_CNN_SEED) in a fixed order (He scaling, batch-norm statistics near
their identity); they are not trained: the example measures code size, memory and agreement with
the interpreter, not accuracy. The model itself (examples/ds_cnn/model.yaml) is hand-written.

Usage:
    .venv/bin/python scripts/gen_ds_cnn.py           # (re)write examples/ds_cnn/weights.safetensors
    .venv/bin/python scripts/gen_ds_cnn.py --check   # regenerate in memory and compare bytes
Requires numpy only.
"""

import argparse
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import write_safetensors  # noqa: E402

DS_CNN_SEED = 20261202
C, BLOCKS, CLASSES = 64, 4, 12


def weights():
    rng = np.random.default_rng(DS_CNN_SEED)
    w = {}

    def normal(shape, scale):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    def bn(name):
        w[f"{name}.gamma"] = (1.0 + normal(C, 0.1)).astype(np.float32)
        w[f"{name}.beta"] = normal(C, 0.1)
        w[f"{name}.mean"] = normal(C, 0.1)
        w[f"{name}.var"] = (1.0 + np.abs(normal(C, 0.1))).astype(np.float32)

    w["conv1.weight"] = normal((C, 1, 10, 4), math.sqrt(2.0 / 40))
    w["conv1.bias"] = normal(C, 0.05)
    bn("bn1")
    for b in range(1, BLOCKS + 1):
        w[f"dw{b}.weight"] = normal((C, 1, 3, 3), math.sqrt(2.0 / 9))
        bn(f"dw{b}.bn")
        w[f"pw{b}.weight"] = normal((C, C, 1, 1), math.sqrt(2.0 / C))
        bn(f"pw{b}.bn")
    w["fc.weight"] = normal((CLASSES, C), math.sqrt(1.0 / C) * 2.0)
    w["fc.bias"] = normal(CLASSES, 0.1)
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "examples", "ds_cnn", "weights.safetensors")
    if args.check:
        with tempfile.TemporaryDirectory() as d:
            tmp = os.path.join(d, "w.safetensors")
            write_safetensors(tmp, weights())
            same = open(tmp, "rb").read() == open(path, "rb").read()
        print("examples/ds_cnn/weights.safetensors", "is current" if same else "is STALE")
        sys.exit(0 if same else 1)
    write_safetensors(path, weights())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
