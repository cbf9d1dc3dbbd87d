#!/usr/bin/env python3
"""GEMM N³ with `precision: bf16` against the same GEMM in f32, one core, in one run (issue 18).

    python3 bench/bf16_gemm.py                    # GEMM 512, 5 rounds of 1 s each
    python3 bench/bf16_gemm.py --n 1024 --rounds 3

Compiles C = A·B (A an input, B a weight, as bench/run.py's gemmN) twice for --target, with
`--precision f32` and `--precision bf16`, links each with bench/harness.c and times them back to
back, interleaved, pinned to --cpu, for --rounds rounds (a burst of load from the machine's
neighbours hits both). Prints each library's best round (median call and GFLOP/s = 2·N³ / call),
the ratio bf16 / f32 in GFLOP/s, which ISA each ran (`vdpbf16ps` or FMA, read from the object's
disassembly) and the bf16 output's largest error against the f32 library's, as a fraction of the
output's largest magnitude. Then issue 18's bar: bf16 at least 1.5× the f32 GFLOP/s where the
target has AVX-512 BF16 (the default target is `x86_64-avx512-bf16` on such a CPU).

Needs numpy (bench/.venv/bin/python or any Python that has it).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run as bench  # noqa: E402  (bench/run.py: run, pinned, log)

# Issue 18: GEMM 512³ with precision bf16 on AVX-512 BF16 at least this many times the f32 GFLOP/s.
BF16_GEMM_BAR = 1.5


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        return []


def default_target():
    flags = cpu_flags()
    if "avx512_bf16" in flags:
        return "x86_64-avx512-bf16"
    return "x86_64-avx512" if "avx512f" in flags else "x86_64-avx2"


def spec(tmp, n):
    import numpy as np

    d = os.path.join(tmp, "spec")
    os.makedirs(os.path.join(d, "w"), exist_ok=True)
    rng = np.random.default_rng(n)
    np.save(os.path.join(d, "w", "w.npy"), rng.standard_normal((n, n)).astype(np.float32))
    x = rng.standard_normal((n, n)).astype(np.float32)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write(f"name: gemm{n}\ninputs:\n  - {{name: x, dtype: f32, shape: [{n}, {n}]}}\n"
                f"outputs: [y]\nparams: w\nops:\n  - {{name: y, op: matmul, inputs: [x, w]}}\n")
    return os.path.join(d, "model.yaml"), x


def isa(obj):
    dis = subprocess.run(["objdump", "-d", obj], capture_output=True, text=True).stdout
    if "vdpbf16ps" in dis:
        return "vdpbf16ps"
    if "vfmadd" in dis and "zmm" in dis:
        return "avx512 fma"
    return "fma" if "vfmadd" in dis else "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto",
                    help="xla-aot target (default: x86_64-avx512-bf16 where the CPU has AVX-512 BF16)")
    ap.add_argument("--n", type=int, default=512, help="M = K = N")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="timed seconds per library and round")
    ap.add_argument("--cpu", type=int, default=0, help="core the runs are pinned to")
    ap.add_argument("--xla-aot", default=None, help="compiler binary (default: build target/release/xla-aot)")
    args = ap.parse_args()
    import numpy as np

    if args.target == "auto":
        args.target = default_target()
    xla_aot = args.xla_aot
    if xla_aot is None:
        bench.log("bf16_gemm: building xla-aot (release)")
        bench.run(["cargo", "build", "--release", "-q", "-p", "xla-aot"], cwd=ROOT)
        xla_aot = os.path.join(ROOT, "target", "release", "xla-aot")
    n = args.n
    name = f"gemm{n}"
    flops = 2.0 * n ** 3
    with tempfile.TemporaryDirectory(prefix="xla-aot-bf16-gemm-") as tmp:
        model, x = spec(tmp, n)
        libs = {}
        for p in ["f32", "bf16"]:
            out_dir = os.path.join(tmp, "out", p)
            bench.run([xla_aot, "compile", model, "--target", args.target, "--precision", p,
                       "--out-dir", out_dir])
            manifest = json.load(open(os.path.join(out_dir, f"{name}.json")))
            exe = os.path.join(out_dir, "bench")
            bench.run(["cc", "-O2", f"-DMODEL={name}", "-I", os.path.join(ROOT, "runtime-min", "include"),
                       os.path.join(HERE, "harness.c"), os.path.join(out_dir, f"lib{name}.a"), "-lpthread",
                       "-o", exe])
            xin = os.path.join(out_dir, "in0.bin")
            np.ascontiguousarray(x).tofile(xin)
            yout = os.path.join(out_dir, "out0.bin")
            argv = [str(manifest["arena_size"]), "1", "1", xin, str(x.nbytes), yout, str(4 * n * n)]
            libs[p] = {"exe": exe, "argv": argv, "out": yout, "runs": [],
                       "isa": isa(os.path.join(out_dir, f"{name}.o"))}
        for rnd in range(args.rounds):
            for p in libs:
                bench.log(f"bf16_gemm: {p} (round {rnd + 1} of {args.rounds})")
                cmd = [libs[p]["exe"], "1", str(args.seconds)] + libs[p]["argv"]
                libs[p]["runs"].append(json.loads(bench.run(bench.pinned(cmd, args.cpu))))
        y = {p: np.fromfile(libs[p]["out"], dtype=np.float32) for p in libs}
    err = float(np.max(np.abs(y["bf16"] - y["f32"]))) / max(float(np.max(np.abs(y["f32"]))), 1e-30)
    print(f"\nGEMM {n}³, target {args.target}, one core pinned to {args.cpu}, "
          f"{args.rounds} interleaved round(s) of {args.seconds} s; best round's median call")
    print(f"{'precision':<10} {'isa':<12} {'µs':>10} {'GFLOP/s':>9}")
    gf = {}
    for p, lb in libs.items():
        best = min(r["median_ns"] for r in lb["runs"])
        gf[p] = flops / best
        print(f"{p:<10} {lb['isa']:<12} {best / 1e3:>10.1f} {gf[p]:>9.1f}")
    ratio = gf["bf16"] / gf["f32"]
    print(f"bf16 / f32: {ratio:.2f}x GFLOP/s; bf16 output error against f32: {err:.2e} of the largest")
    if libs["bf16"]["isa"] != "vdpbf16ps":
        print(f"note: {args.target} has no AVX-512 BF16: bf16 ran as f32 FMA on rounded values (no bar)")
        return 0
    verdict = "PASS" if ratio >= BF16_GEMM_BAR else "FAIL"
    print(f"{verdict}: GEMM {n}³ bf16 {ratio:.2f}x the f32 GFLOP/s (bar {BF16_GEMM_BAR})")
    return 0 if ratio >= BF16_GEMM_BAR else 1


if __name__ == "__main__":
    sys.exit(main())
