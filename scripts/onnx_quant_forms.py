#!/usr/bin/env python3
"""Writes one light model quantized by onnxruntime in each of the forms its quantizer's options
give (docs/import.md, "Other QDQ forms"), for `bench/onnx_vs_ort.py` to compile, compare and
time: weights behind QuantizeLinear/DequantizeLinear pairs, float biases, uint8 and int4
weights, per-tensor scales, reduce_range, symmetric int8 and 16-bit activations, a QDQ pair per
consumer, entropy calibration, the QOperator format and dynamic quantization. Not a CI test
(the forms CI keeps are in `scripts/onnx_quantized.py`).

    .venv/bin/python scripts/onnx_quant_forms.py squeezenet --out target/onnx-quant-forms
    .venv/bin/python bench/onnx_vs_ort.py --threads 1 --ort-config session.qdqisint8allowed=1 \\
        $(for f in target/onnx-quant-forms/*.onnx; do echo --onnx $f; done)

A form the installed onnxruntime cannot write is reported and skipped.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Calibration batches (seeded normal images), fewer than onnx_quantized.py's: ranges only.
CALIBRATION = 2


def forms(QuantFormat, QuantType, CalibrationMethod):
    """(name, opset or None, quantize_static/quantize_dynamic keyword arguments)."""
    qdq = dict(quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
               activation_type=QuantType.QUInt8)
    return [
        ("default", None, qdq),
        ("qdq_weights", None, dict(qdq, extra_options={"AddQDQPairToWeight": True})),
        ("float_bias", None, dict(qdq, extra_options={"QuantizeBias": False})),
        ("u8_weights", None, dict(qdq, weight_type=QuantType.QUInt8)),
        ("int4_weights", 21, dict(qdq, weight_type=QuantType.QInt4)),
        ("per_tensor", None, dict(qdq, per_channel=False)),
        ("reduce_range", None, dict(qdq, reduce_range=True)),
        ("s8_symmetric", None, dict(qdq, activation_type=QuantType.QInt8,
                                    extra_options={"ActivationSymmetric": True})),
        ("u16_activations", None, dict(qdq, activation_type=QuantType.QUInt16)),
        ("dedicated_pairs", None, dict(qdq, extra_options={"DedicatedQDQPair": True})),
        ("entropy", None, dict(qdq, calibrate_method=CalibrationMethod.Entropy)),
        ("qoperator_s8", None, dict(qdq, quant_format=QuantFormat.QOperator,
                                    activation_type=QuantType.QInt8)),
        ("dynamic_u8", None, dict(dynamic=True, weight_type=QuantType.QUInt8)),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a light model's name (its directory under --light)")
    ap.add_argument("--light", default="target/onnx-light")
    ap.add_argument("--out", default="target/onnx-quant-forms")
    args = ap.parse_args()
    import numpy as np
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    import onnx_quantized

    os.makedirs(args.out, exist_ok=True)
    src = os.path.join(args.light, args.model, args.model + ".onnx")
    failed = 0
    for form, opset, kw in forms(QuantFormat, QuantType, CalibrationMethod):
        kw = dict(kw)
        dst = os.path.join(args.out, f"{args.model}_{form}.onnx")
        with tempfile.TemporaryDirectory() as tmp:
            pre = os.path.join(tmp, "pre.onnx")
            name, shape = onnx_quantized.prepare(onnx, src, pre)
            if opset:
                onnx.save(version_converter.convert_version(onnx.load(pre), opset), pre)
            try:
                if kw.pop("dynamic", False):
                    quantize_dynamic(pre, dst, **kw)
                else:
                    quantize_static(pre, dst, onnx_quantized.calibration(np, name, shape, CALIBRATION),
                                    **kw)
                print("wrote", dst, flush=True)
            except Exception as e:  # the quantizer's own exception types
                failed += 1
                print(f"skipped {form}: {str(e).splitlines()[0] if str(e) else type(e).__name__}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
