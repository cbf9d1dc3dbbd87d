#!/usr/bin/env python3
"""int8 GEMM N³ (QLinearMatMul: uint8 activations, per-column int8 weights) against the measured
`vpdpbusd` peak of one core and against onnxruntime's int8 kernel, in one run (issue 17).

    .venv/bin/python bench/int8_gemm.py                 # GEMM 512, 3 rounds
    .venv/bin/python bench/int8_gemm.py --n 1024 --rounds 2
    .venv/bin/python bench/int8_gemm.py --target x86_64-avx2   # int8 vs f32 GEMM on one ISA

Writes the model with onnx.helper (seeded), builds bench/peak_vnni.c (16 independent `vpdpbusd`
chains, 128 ops each), then per round, interleaved: the peak probe, `xla-aot profile --min` of the
model on the host (its product kernel's GOP/s = 2·N³ / kernel time, and the whole call), and
onnxruntime (one thread, best of timed calls). Prints which instruction the product ran (from the
object's disassembly), the largest difference from onnxruntime's output in LSB, and issue 17's
bar: the product kernel at least 80% of the peak where the CPU has AVX-512 VNNI.

With --target T (a built-in target this CPU runs, other than host) the int8 model and an f32
MatMul of the same N (the same weights, dequantized, as a float constant; float activations) are
compiled for T, linked with bench/harness.c and timed whole-call on one core (best of the
rounds); it prints both in GOP/s (2·N³ / call time: the int8 call's quantize and dequantize steps
are inside its time), which instruction each product ran, and the int8 output's largest
difference from onnxruntime's in LSB. No peak and no bar then.

Needs numpy, onnx and onnxruntime (scripts/test.sh's .venv has them) and a C compiler.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Issue 17: int8 GEMM 512³ at least this share of the measured vpdpbusd peak.
VNNI_PEAK_BAR = 0.8


def log(msg):
    print(f"int8_gemm: {msg}", file=sys.stderr, flush=True)


def model(path, n, lo=-128):
    import numpy as np
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    rng = np.random.default_rng(n)
    w = rng.integers(lo, 128, (n, n)).astype(np.int8)
    ws = (rng.random(n) * 0.01 + 0.001).astype(np.float32)
    inits = [nh.from_array(np.array(0.02, np.float32), "xs"), nh.from_array(np.array(128, np.uint8), "xzp"),
             nh.from_array(w, "w"), nh.from_array(ws, "ws"), nh.from_array(np.zeros(n, np.int8), "wzp"),
             nh.from_array(np.array(0.05 * np.sqrt(n), np.float32), "ys"),
             nh.from_array(np.array(120, np.uint8), "yzp")]
    node = h.make_node("QLinearMatMul", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"], ["y"])
    g = h.make_graph([node], f"qgemm{n}", [h.make_tensor_value_info("x", T.UINT8, [n, n])],
                     [h.make_tensor_value_info("y", T.UINT8, [n, n])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return rng.integers(0, 256, (n, n)).astype(np.uint8)


def profile(xla_aot, path, xin, runs):
    out = subprocess.run([xla_aot, "profile", path, "--min", "--runs", str(runs), "--input", f"x={xin}"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*\d+\s+(\S+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)", line)
        if m:
            rows.append((float(m.group(3)), m.group(1), float(m.group(2)), float(m.group(4))))
    whole = re.search(r"whole call ([\d.]+) µs median \(([\d.]+) min\)", out)
    share, name, us, gops = max(rows)
    return {"kernel": name, "kernel_us": us, "kernel_gops": gops, "whole_us": float(whole.group(2))}


def f32_model(path, n, lo=-128):
    """The float product the int8 model stands for: x [N, N] f32 times the dequantized weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    rng = np.random.default_rng(n)
    w = rng.integers(lo, 128, (n, n)).astype(np.int8)
    ws = (rng.random(n) * 0.01 + 0.001).astype(np.float32)
    wf = (w.astype(np.float32) * ws).astype(np.float32)
    node = h.make_node("MatMul", ["x", "w"], ["y"])
    g = h.make_graph([node], f"fgemm{n}", [h.make_tensor_value_info("x", T.FLOAT, [n, n])],
                     [h.make_tensor_value_info("y", T.FLOAT, [n, n])], [nh.from_array(wf, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return (rng.random((n, n)) * 2 - 1).astype(np.float32)


def product_isa(obj):
    """The instruction the object's products multiply with, from its disassembly."""
    dis = subprocess.run(["objdump", "-d", obj], capture_output=True, text=True).stdout
    for name in ("vpdpbusd", "vpmaddubsw", "vpmaddwd", "pmaddwd"):
        if name in dis:
            reg = "zmm" if "zmm" in dis else "ymm" if "ymm" in dis else "xmm"
            return f"{name} {reg}"
    return "avx512 fma" if "zmm" in dis else "fma" if "vfmadd" in dis else "sse mul+add"


def harness_time(xla_aot, path, target, tmp, x, rounds, seconds):
    """Compiles `path` for `target`, links bench/harness.c and times one-thread calls on input
    `x`: (best min_ns over the rounds, the product's instruction, the output array)."""
    import json
    import numpy as np

    name = os.path.splitext(os.path.basename(path))[0]
    out_dir = os.path.join(tmp, f"{name}-{target}")
    subprocess.run([xla_aot, "compile", path, "--target", target, "--out-dir", out_dir], check=True,
                   capture_output=True)
    lib = sorted(f for f in os.listdir(out_dir) if f.endswith(".json"))[0][:-5]
    manifest = json.load(open(os.path.join(out_dir, f"{lib}.json")))
    exe = os.path.join(out_dir, "bench")
    subprocess.run(["cc", "-O2", f"-DMODEL={lib}", "-I", os.path.join(ROOT, "runtime-min", "include"),
                    os.path.join(HERE, "harness.c"), os.path.join(out_dir, f"lib{lib}.a"), "-lpthread",
                    "-o", exe], check=True)
    xin = os.path.join(out_dir, "x.bin")
    x.tofile(xin)
    out = manifest["outputs"][0]
    dtype = np.uint8 if out["dtype"] == "u8" else np.float32
    count = int(np.prod(out["shape"]))
    yout = os.path.join(out_dir, "y.bin")
    best = float("inf")
    for rnd in range(rounds):
        log(f"{name} on {target}: round {rnd + 1} of {rounds}")
        r = subprocess.run([exe, "1", str(seconds), str(manifest["arena_size"]), "1", "1", xin,
                            str(x.nbytes), yout, str(count * np.dtype(dtype).itemsize)],
                           capture_output=True, text=True, check=True)
        best = min(best, json.loads(r.stdout)["min_ns"])
    isa = product_isa(os.path.join(out_dir, f"lib{lib}.a"))
    return best, isa, np.fromfile(yout, dtype=dtype).reshape(out["shape"])


def against_f32(args, xla_aot):
    """--target T: the int8 product against the f32 one on T (module doc)."""
    import numpy as np
    import onnxruntime as ort

    n = args.n
    with tempfile.TemporaryDirectory(prefix="xla-aot-int8-gemm-") as tmp:
        qpath = os.path.join(tmp, f"qgemm{n}.onnx")
        lo = -127 if args.symmetric else -128
        x = model(qpath, n, lo)
        fpath = os.path.join(tmp, f"fgemm{n}.onnx")
        xf = f32_model(fpath, n, lo)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        y_ort = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        q_ns, q_isa, y = harness_time(xla_aot, qpath, args.target, tmp, x, args.rounds, args.seconds)
        f_ns, f_isa, _ = harness_time(xla_aot, fpath, args.target, tmp, xf, args.rounds, args.seconds)
    lsb = int(np.max(np.abs(y.astype(np.int32) - y_ort.astype(np.int32))))
    ops = 2.0 * n ** 3
    weights = "[-127, 127]" if args.symmetric else "[-128, 127]"
    print(f"\nGEMM {n}³ on {args.target}, int8 weights in {weights}, one core, whole call, best of "
          f"{args.rounds} round(s) of {args.seconds} s")
    print(f"int8 (QLinearMatMul u8 x s8, per-column scales; {q_isa}): {q_ns / 1e3:.1f} µs, "
          f"{ops / q_ns:.1f} GOP/s")
    print(f"f32  (MatMul; {f_isa}): {f_ns / 1e3:.1f} µs, {ops / f_ns:.1f} GFLOP/s")
    print(f"int8 / f32 speed: {f_ns / q_ns:.2f}x; int8 largest difference from onnxruntime: {lsb} LSB")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=512, help="M = K = N")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=200, help="profiled calls per round")
    ap.add_argument("--xla-aot", default=None, help="compiler binary (default: build target/release/xla-aot)")
    ap.add_argument("--target", default="host", help="host (default: profile, peak, bar), or a built-in "
                    "target this CPU runs: int8 against f32 on that target (module doc)")
    ap.add_argument("--seconds", type=float, default=1.0, help="--target: timed seconds per round and model")
    ap.add_argument("--symmetric", action="store_true", help="--target: int8 weights in [-127, 127] (a "
                    "symmetric quantizer's; AVX2 then multiplies with vpmaddubsw on signs), else [-128, 127]")
    args = ap.parse_args()
    import numpy as np
    import onnxruntime as ort

    xla_aot = args.xla_aot
    if xla_aot is None:
        log("building xla-aot (release)")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "xla-aot"], cwd=ROOT, check=True)
        xla_aot = os.path.join(ROOT, "target", "release", "xla-aot")
    if args.target != "host":
        return against_f32(args, xla_aot)
    n = args.n
    with tempfile.TemporaryDirectory(prefix="xla-aot-int8-gemm-") as tmp:
        path = os.path.join(tmp, f"qgemm{n}.onnx")
        x = model(path, n)
        xin = os.path.join(tmp, "x.npy")
        np.save(xin, x)
        flags = open("/proc/cpuinfo").read()
        vnni = "avx512_vnni" in flags
        peak_exe = os.path.join(tmp, "peak_vnni")
        if vnni:
            subprocess.run(["cc", "-O2", "-mavx512f", "-mavx512vnni", os.path.join(HERE, "peak_vnni.c"),
                            "-o", peak_exe], check=True)
        out_dir = os.path.join(tmp, "lib")
        subprocess.run([xla_aot, "compile", path, "--target", "host", "--out-dir", out_dir], check=True,
                       capture_output=True)
        dis = subprocess.run(["objdump", "-d", os.path.join(out_dir, f"qgemm{n}.o")], capture_output=True,
                             text=True).stdout
        isa = "vpdpbusd" if "vpdpbusd" in dis else ("avx512 fma" if "zmm" in dis else "fma")
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        y_ort = sess.run(None, {"x": x})[0]
        ydir = os.path.join(tmp, "y")
        subprocess.run([xla_aot, "run", path, "--input", f"x={xin}", "--output-dir", ydir], check=True,
                       capture_output=True)
        y = np.load(os.path.join(ydir, "y.npy"))
        lsb = int(np.max(np.abs(y.astype(np.int32) - y_ort.astype(np.int32))))
        peaks, profs, orts = [], [], []
        for rnd in range(args.rounds):
            log(f"round {rnd + 1} of {args.rounds}")
            if vnni:
                peaks.append(float(subprocess.run([peak_exe], capture_output=True, text=True,
                                                  check=True).stdout.split()[0]))
            profs.append(profile(xla_aot, path, xin, args.runs))
            best = float("inf")
            t_end = time.perf_counter() + 1.0
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                sess.run(None, {"x": x})
                best = min(best, time.perf_counter() - t0)
            orts.append(best * 1e6)
    p = min(profs, key=lambda r: r["kernel_us"])
    whole = min(r["whole_us"] for r in profs)
    ort_us = min(orts)
    print(f"\nint8 GEMM {n}³ (QLinearMatMul u8 x s8, per-column scales), one core, {args.rounds} round(s)")
    print(f"product kernel {p['kernel']} ({isa}): {p['kernel_us']:.1f} µs, {p['kernel_gops']:.1f} GOP/s")
    print(f"whole call: xla-aot {whole:.1f} µs, onnxruntime {ort_us:.1f} µs, ratio {whole / ort_us:.3f}")
    print(f"largest difference from onnxruntime: {lsb} LSB")
    if not vnni:
        print("note: this CPU has no AVX-512 VNNI: no peak probe, no bar")
        return 0
    peak = max(peaks)
    share = p["kernel_gops"] / peak
    print(f"vpdpbusd peak (bench/peak_vnni.c): {peak:.1f} GOP/s; product kernel at {100 * share:.1f}%")
    ok = share >= VNNI_PEAK_BAR and isa == "vpdpbusd"
    print(f"{'PASS' if ok else 'FAIL'}: int8 GEMM {n}³ at {100 * share:.1f}% of the vpdpbusd peak "
          f"(bar {100 * VNNI_PEAK_BAR:.0f}%)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
