#!/usr/bin/env python3
"""Copies MLPerf Tiny's reference `.tflite` models from a local checkout of mlcommons/tiny and
writes TFLite Micro's outputs for seeded inputs, for the opt-in test
`XLA_AOT_MLPERF_TINY_DIR=DIR cargo test --test tflite mlperf` (and tests/mcu.rs on the boards).

    .venv/bin/python bench/mlperf_tiny.py --tiny /path/to/mlcommons/tiny [--out target/mlperf-tiny]

`--tiny` is a work tree or a bare git directory (read at HEAD). Writes `OUT/<model>/model.tflite`,
`input_0.npy` (the model's input dtype: int8 models take int8, seeded uniform over the type's
range; float models N(0, 1)), `output_J.npy` (TFLite Micro's, the `tflite-micro` package's
reference kernels) and `meta.json` ({"kind": "int8" | "float", "source": path in the checkout}).
The models are not committed (their licence is the checkout's; the tests use only the package
registries); nothing here needs the network. Models TFLite Micro or the compiler do not take are
listed as skipped with the reason.
"""

import argparse
import json
import pathlib
import subprocess
import sys

import numpy as np

# The five closed-division reference models and their float versions (benchmark/training/...).
MODELS = {
    "kws_ref_model": ("keyword_spotting/trained_models/kws_ref_model.tflite", "int8"),
    "vww_96_int8": ("visual_wake_words/trained_models/vww_96_int8.tflite", "int8"),
    "pretrainedResnet_quant": ("image_classification/trained_models/pretrainedResnet_quant.tflite", "int8"),
    "ad01_int8": ("anomaly_detection/trained_models/ad01_int8.tflite", "int8"),
    "str_ww_ref_model": ("streaming_wakeword/trained_models/str_ww_ref_model.tflite", "int8"),
    "vww_96_float": ("visual_wake_words/trained_models/vww_96_float.tflite", "float"),
    "pretrainedResnet": ("image_classification/trained_models/pretrainedResnet.tflite", "float"),
    "ad01_fp32": ("anomaly_detection/trained_models/ad01_fp32.tflite", "float"),
}
# TFLite Micro's arena for the largest of them (vww: ~100 KB) with room to spare.
ARENA = 8 << 20


def read_model(tiny: pathlib.Path, rel: str) -> bytes:
    path = "benchmark/training/" + rel
    if (tiny / path).exists():
        return (tiny / path).read_bytes()
    return subprocess.run(
        ["git", "-C", str(tiny), "show", f"HEAD:{path}"], check=True, capture_output=True
    ).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", required=True, type=pathlib.Path)
    ap.add_argument("--out", default="target/mlperf-tiny", type=pathlib.Path)
    args = ap.parse_args()
    from tflite_micro.python.tflite_micro import runtime

    skipped = []
    for i, (name, (rel, kind)) in enumerate(sorted(MODELS.items())):
        try:
            data = read_model(args.tiny, rel)
        except (subprocess.CalledProcessError, OSError) as e:
            skipped.append(f"{name}: not in the checkout ({e})")
            continue
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.tflite").write_bytes(data)
        try:
            interp = runtime.Interpreter.from_bytes(data, arena_size=ARENA)
        except Exception as e:  # TFLite Micro refuses the model
            skipped.append(f"{name}: TFLite Micro refused it ({e})")
            continue
        rng = np.random.default_rng(1000 + i)
        details = interp.get_input_details(0)
        shape, dtype = tuple(details["shape"]), details["dtype"]
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max + 1, size=shape).astype(dtype)
        else:
            x = rng.standard_normal(shape).astype(dtype)
        interp.set_input(x, 0)
        interp.invoke()
        np.save(out / "input_0.npy", x)
        j = 0
        while True:
            try:
                y = interp.get_output(j)
            except Exception:
                break
            np.save(out / f"output_{j}.npy", y)
            j += 1
        (out / "meta.json").write_text(json.dumps({"kind": kind, "source": rel}, indent=1) + "\n")
        dims = "x".join(str(int(d)) for d in shape)
        print(f"{name}: {kind}, input {dims} {np.dtype(dtype).name}, {j} output(s)")
    for s in skipped:
        print("skipped", s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
