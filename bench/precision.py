#!/usr/bin/env python3
"""xla-aot's weight precisions against its own f32 build, one core, batch 1, in one run (issue 18).

    python3 bench/precision.py                      # the four examples and GEMM 512, every precision
    python3 bench/precision.py --models mlp --rounds 5 --seconds 1

For every model it compiles one library per precision (`--precision f32|bf16-weights|f16-weights|bf16`)
for --target, links each with bench/harness.c and, in each of --rounds rounds, times them back to
back pinned to --cpu (the precisions interleave, so a burst of load from the machine's neighbours
hits all of them). It prints per model and precision the median call (of the round medians, with
the fastest call), the time and the archive size against f32, and the largest output error against
the f32 library as a fraction of the output's largest magnitude; then issue 18's bars for the mlp:
bf16-weights at most 0.6 of the f32 time and 0.55 of the f32 archive.

Needs numpy (run it with bench/.venv/bin/python or any Python that has it; bench/run.py makes that
venv). GEMM N means C = A.B with A an input and B a weight, as in bench/run.py.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run as bench  # noqa: E402  (bench/run.py: models, pinned, run, default_target)

PRECISIONS = ["f32", "bf16-weights", "f16-weights", "bf16"]
# Issue 18: the mlp with bf16-weights at most this fraction of its f32 time and archive size.
MLP_TIME_BAR = 0.6
MLP_SIZE_BAR = 0.55


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto",
                    help="xla-aot target (default: x86_64-avx512, or x86_64-avx512-bf16 with AVX-512 BF16, "
                         "where the CPU has AVX-512, else x86_64-avx2)")
    ap.add_argument("--models", default="simplenet,mlp,mobilenet_block,tiny_transformer,gemm512",
                    help="comma-separated subset of bench/run.py's models")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="timed seconds per library and round")
    ap.add_argument("--cpu", type=int, default=0, help="core the runs are pinned to")
    args = ap.parse_args()
    import numpy as np

    if args.target == "auto":
        args.target = bench.default_target()
        if args.target == "x86_64-avx512" and "avx512_bf16" in open("/proc/cpuinfo").read():
            args.target = "x86_64-avx512-bf16"  # the same code but for precision bf16 (vdpbf16ps)
    bench.log("precision: building xla-aot (release)")
    bench.run(["cargo", "build", "--release", "-q", "-p", "xla-aot"], cwd=ROOT)
    xla_aot = os.path.join(ROOT, "target", "release", "xla-aot")
    rows, failed = [], []
    with tempfile.TemporaryDirectory(prefix="xla-aot-precision-") as tmp:
        for name, spec, inputs in bench.models([m for m in args.models.split(",") if m], tmp):
            xs = [np.load(p) for p in inputs]
            libs = {}
            for p in PRECISIONS:
                out_dir = os.path.join(tmp, "out", name, p)
                bench.run([xla_aot, "compile", spec, "--target", args.target, "--precision", p,
                           "--out-dir", out_dir])
                manifest = json.load(open(os.path.join(out_dir, f"{name}.json")))
                exe = os.path.join(out_dir, "bench")
                lib = os.path.join(out_dir, f"lib{name}.a")
                bench.run(["cc", "-O2", f"-DMODEL={name}", "-I", os.path.join(ROOT, "runtime-min", "include"),
                           os.path.join(HERE, "harness.c"), lib, "-lpthread", "-o", exe])
                argv = []
                for i, x in enumerate(xs):
                    b = os.path.join(out_dir, f"in{i}.bin")
                    np.ascontiguousarray(x).tofile(b)
                    argv += [b, str(x.nbytes)]
                outs = manifest["outputs"]
                for i, o in enumerate(outs):
                    argv += [os.path.join(out_dir, f"out{i}.bin"), str(4 * int(np.prod(o["shape"])))]
                head = [str(manifest["arena_size"]), str(len(xs)), str(len(outs))]
                libs[p] = {"exe": exe, "argv": head + argv, "dir": out_dir, "outs": outs,
                           "size": os.path.getsize(lib), "runs": []}
            for rnd in range(args.rounds):
                for p in PRECISIONS:
                    bench.log(f"precision: {name} {p} (round {rnd + 1} of {args.rounds})")
                    lb = libs[p]
                    cmd = [lb["exe"], "1", str(args.seconds)] + lb["argv"]
                    lb["runs"].append(json.loads(bench.run(bench.pinned(cmd, args.cpu))))
            ys = {p: [np.fromfile(os.path.join(libs[p]["dir"], f"out{i}.bin"), dtype=np.float32)
                      for i in range(len(libs[p]["outs"]))] for p in PRECISIONS}
            for p in PRECISIONS:
                lb = libs[p]
                r = sorted(lb["runs"], key=lambda r: r["median_ns"])[(len(lb["runs"]) - 1) // 2]
                err = max(float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-30)
                          for a, b in zip(ys[p], ys["f32"]))
                rows.append({"model": name, "precision": p, "median_ns": r["median_ns"],
                             "min_ns": min(x["min_ns"] for x in lb["runs"]), "size": lb["size"], "err": err})
    f32 = {r["model"]: r for r in rows if r["precision"] == "f32"}
    print(f"\ntarget {args.target}, one core pinned to {args.cpu}, {args.rounds} round(s) of {args.seconds} s")
    print(f"{'model':<18} {'precision':<13} {'µs (min)':>18} {'time / f32':>11} {'.a bytes':>11} "
          f"{'.a / f32':>9} {'error / max':>12}")
    for r in rows:
        base = f32[r["model"]]
        t = f"{r['median_ns'] / 1e3:.2f} ({r['min_ns'] / 1e3:.2f})"
        print(f"{r['model']:<18} {r['precision']:<13} {t:>18} {r['median_ns'] / base['median_ns']:>11.3f} "
              f"{r['size']:>11} {r['size'] / base['size']:>9.3f} {r['err']:>12.2e}")
    mlp = [r for r in rows if r["model"] == "mlp" and r["precision"] == "bf16-weights"]
    if mlp:
        r, base = mlp[0], f32["mlp"]
        t, s = r["median_ns"] / base["median_ns"], r["size"] / base["size"]
        for what, v, bar in [("time", t, MLP_TIME_BAR), ("archive", s, MLP_SIZE_BAR)]:
            verdict = "PASS" if v <= bar else "FAIL"
            print(f"{verdict}: mlp bf16-weights {what} {v:.3f} of f32's (bar {bar})")
            if v > bar:
                failed.append(f"mlp bf16-weights {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
