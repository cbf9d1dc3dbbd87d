#!/usr/bin/env python3
"""Finds where a quantized ONNX model's xla-aot results first leave onnxruntime's: every
quantized intermediate (the outputs of QuantizeLinear, QLinear* ops and MaxPool) becomes a graph
output, both run the model on one input, and each tensor's count of differing elements and
largest difference is printed in graph order (the first nonzero row is where to look).

    .venv/bin/python scripts/onnx_quant_diff.py target/onnx-quantized/squeezenet_qdq_s8/squeezenet_qdq_s8.onnx \
        target/onnx-quantized/squeezenet_qdq_s8/input_0.npy [--xla-aot target/release/xla-aot]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

QUANTIZED_OUTPUTS = ("QuantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearConcat", "QLinearAdd",
                     "QLinearMul", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax",
                     "QGemm", "MaxPool")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("input", help="the model's one input, as .npy")
    ap.add_argument("--xla-aot", default="target/release/xla-aot")
    args = ap.parse_args()
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import shape_inference

    m = onnx.load(args.model)
    inferred = shape_inference.infer_shapes(m)
    infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        if n.op_type in QUANTIZED_OUTPUTS and n.output[0] in infos and n.output[0] not in have:
            m.graph.output.append(infos[n.output[0]])
            have.add(n.output[0])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.onnx")
        onnx.save(m, path)
        x = np.load(args.input)
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        want = s.run(None, {s.get_inputs()[0].name: x})
        out = os.path.join(tmp, "out")
        r = subprocess.run([args.xla_aot, "run", path, "--input", f"0={args.input}", "--output-dir", out],
                           capture_output=True, text=True)
        if r.returncode:
            sys.stderr.write(r.stderr)
            return 1
        files = {os.path.basename(f)[:-4]: f for f in glob.glob(os.path.join(out, "*.npy"))}
        for name, w in zip(names, want):
            key = name.replace("/", "_")
            f = files.get(key) or next((v for k, v in files.items() if k.replace("_", "") == key.replace("_", "")), None)
            if f is None:
                print(f"{name:50s} (no xla-aot output of that name)")
                continue
            g = np.load(f).astype(np.float64).reshape(w.shape)
            d = np.abs(g - w.astype(np.float64))
            print(f"{name:50s} {str(w.dtype):8s} differ {int((d > 0).sum()):7d}/{w.size:<8d} max {d.max():.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
