#!/usr/bin/env python3
"""xla-aot against XLA CPU (JAX), onnxruntime and numpy, one core, batch 1, in one run.

    python3 bench/run.py                 # everything (creates bench/.venv on first use)
    python3 bench/run.py --models mlp,gemm512 --seconds 1
    python3 bench/run.py --markdown docs/performance-table.md
    python3 bench/run.py --rounds 3          # on a noisy machine: median of 3 back-to-back rounds

What it does, in this order, in one process tree:
  1. creates (once) a venv with numpy, jax, jaxlib, onnx, onnxruntime and pyyaml, and re-runs
     itself inside it;
  2. builds xla-aot (release), compiles every model for --target with the full pipeline (timing
     spec -> .a), and links each with bench/harness.c (a C program that times back-to-back calls);
  3. measures the machine's single-core fp32 FMA peak (bench/peak.c);
  4. for every model runs, each pinned to the same core: ours (harness), XLA CPU through jax.jit
     (weights as constants, block_until_ready), onnxruntime (intra_op_num_threads=1) and numpy
     (OpenBLAS with one thread) - every peer in a fresh worker process;
  5. checks every peer's outputs against ours (max |diff| <= 2e-4 * max(1, max |ours|));
  6. for the GEMMs, runs ours again with 2 threads through the parallel-for hook (unpinned);
  7. prints medians, ratios (ours / best peer), GFLOP/s, % of peak and the goals of issue 6.

Models: the four examples (batch 1, golden inputs) and GEMM N x N x N for N in 256, 512, 1024
(A an input, B a weight). Timings are medians of per-call wall times after a warm-up.

Real ONNX models against onnxruntime:

    python3 bench/run.py --light                  # onnx's nine light architectures + issue 16's bars
    python3 bench/run.py --light --models squeezenet,shufflenet --seconds 0.5
    python3 bench/run.py --onnx model.onnx --input-shape images=1,3,224,224 [--dim S=N] [--freeze N=V]

With --onnx or --light every argument except --venv goes to bench/onnx_vs_ort.py, which does
the work (its docstring has the options; its defaults apply, e.g. 3 rounds of 1 s): one thread
and 2 threads through the parallel-for hook, ours and onnxruntime, outputs checked. It runs with
this Python when that has numpy, onnx and onnxruntime, else inside bench/.venv (made as above).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = ["simplenet", "mlp", "mobilenet_block", "tiny_transformer"]
GEMMS = [256, 512, 1024]
# Larger products, timed only when --models names them (numpy alone takes ~0.1 s a call).
LARGE_GEMMS = [2048]
PEERS = ["xla", "ort", "numpy"]
REQUIREMENTS = ["numpy", "pyyaml", "jax", "jaxlib", "onnx", "onnxruntime"]

# Single-threaded peers: XLA without its Eigen pool, OpenBLAS / OpenMP with one thread.
ONE_THREAD_ENV = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}

# Goals (issue 6): ours / best peer at most this, per model.
GOALS = {"simplenet": 0.5, "mobilenet_block": 0.5, "mlp": 0.7, "tiny_transformer": 0.7}
GEMM_GOAL_MODEL = "gemm512"
GEMM_VS_BEST = 0.9      # ours >= 0.9x the speed of the best of XLA and OpenBLAS
GEMM_PEAK = 0.70        # ours >= 70% of the measured peak
GEMM_THREADS = 1.7      # 2 threads >= 1.7x one
COMPILE_SECONDS = 2.0   # spec -> .a per example


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- venv bootstrap ----------------------------------------------------------------------------

def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.path.exists(py):
        log(f"bench: creating {venv} (numpy, jax, onnxruntime; a few minutes once)")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    missing = subprocess.run([py, "-c", "import numpy, yaml, jax, onnx, onnxruntime"],
                             capture_output=True).returncode != 0
    if missing:
        subprocess.run([py, "-m", "pip", "install", "-q"] + REQUIREMENTS, check=True)
    os.execv(py, [py] + sys.argv)


# ---- models --------------------------------------------------------------------------------------

def models(selected, tmp):
    """[(name, spec path, [input .npy paths])]"""
    import numpy as np
    import yaml

    out = []
    for ex in EXAMPLES:
        if selected and ex not in selected:
            continue
        d = os.path.join(ROOT, "examples", ex)
        spec = yaml.safe_load(open(os.path.join(d, "model.yaml")))
        ins = [os.path.join(d, "golden", "inputs", i["name"] + ".npy") for i in spec["inputs"]]
        out.append((ex, os.path.join(d, "model.yaml"), ins))
    for n in GEMMS + LARGE_GEMMS:
        name = f"gemm{n}"
        if (selected or n in LARGE_GEMMS) and name not in selected:
            continue
        d = os.path.join(tmp, "specs", name)
        os.makedirs(os.path.join(d, "w"), exist_ok=True)
        rng = np.random.default_rng(n)
        np.save(os.path.join(d, "w", "w.npy"), rng.standard_normal((n, n)).astype(np.float32))
        np.save(os.path.join(d, "x.npy"), rng.standard_normal((n, n)).astype(np.float32))
        with open(os.path.join(d, "model.yaml"), "w") as f:
            f.write(f"name: {name}\ninputs:\n  - {{name: x, dtype: f32, shape: [{n}, {n}]}}\n"
                    f"outputs: [y]\nparams: w\nops:\n  - {{name: y, op: matmul, inputs: [x, w]}}\n")
        out.append((name, os.path.join(d, "model.yaml"), [os.path.join(d, "x.npy")]))
    return out


def load_model(spec_path):
    """(spec dict, weights dict) of a spec whose params are a safetensors file or an npy dir."""
    import numpy as np
    import yaml
    from peers import load_safetensors

    spec = yaml.safe_load(open(spec_path))
    params = os.path.join(os.path.dirname(spec_path), spec.get("params", ""))
    if params.endswith(".safetensors"):
        weights = load_safetensors(params)
    elif os.path.isdir(params):
        weights = {f[:-4]: np.load(os.path.join(params, f)) for f in sorted(os.listdir(params))
                   if f.endswith(".npy")}
    else:
        weights = {}
    return spec, weights


# ---- worker: one peer, one model, pinned, timed ----------------------------------------------------

def time_calls(call, seconds):
    for _ in range(10):
        call()
    times = []
    start = time.perf_counter()
    while len(times) < 10 or (time.perf_counter() - start < seconds and len(times) < 200000):
        t = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t)
    times.sort()
    return {"median_ns": times[len(times) // 2], "min_ns": times[0], "iters": len(times)}


def worker(args):
    import numpy as np

    sys.path.insert(0, HERE)
    import peers

    spec, weights = load_model(args.spec)
    xs = [np.load(p) for p in args.inputs.split(",")]
    if args.worker == "xla":
        import jax

        f = jax.jit(peers.jax_model(spec, weights))
        dx = [jax.device_put(x) for x in xs]

        def call():
            return [o.block_until_ready() for o in f(*dx)]
    elif args.worker == "ort":
        f = peers.ort_model(spec, weights)

        def call():
            return f(*xs)
    else:
        f = peers.numpy_model(spec, weights)

        def call():
            return f(*xs)
    outs = [np.asarray(o) for o in call()]
    timing = time_calls(call, args.seconds)
    np.savez(args.out, *outs)
    print(json.dumps(timing))


# ---- driver ------------------------------------------------------------------------------------------

def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def pinned(cmd, cpu):
    return ["taskset", "-c", str(cpu)] + cmd


def default_target():
    """x86_64-avx512 on a CPU with AVX-512F, else x86_64-avx2 (the AVX-512 build would not run)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        flags = []
    return "x86_64-avx512" if "avx512f" in flags else "x86_64-avx2"


def measure_peak(tmp, vector_bits, cpu):
    exe = os.path.join(tmp, "peak")
    flags = {512: ["-mavx512f", "-mfma"], 256: ["-mavx2", "-mfma"]}.get(vector_bits, ["-mavx2", "-mfma"])
    run(["cc", "-O2"] + flags + [os.path.join(HERE, "peak.c"), "-o", exe])
    return float(run(pinned([exe], cpu)).split()[0])


def forward_to_onnx_vs_ort():
    """--onnx FILE / --light [DIR]: hand every argument but --venv to bench/onnx_vs_ort.py (one
    implementation of the ONNX benchmark) and return its exit status; None without either flag."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--onnx", action="append", default=[])
    pre.add_argument("--light", nargs="?", const="")
    pre.add_argument("--venv", default=os.path.join(HERE, ".venv"))
    known, _ = pre.parse_known_args()
    if not known.onnx and known.light is None:
        return None
    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--venv":
            skip = True
        elif not a.startswith("--venv="):
            argv.append(a)
    try:
        import numpy, onnx, onnxruntime  # noqa: F401,E401
    except ImportError:
        ensure_venv(os.path.abspath(known.venv))   # re-runs run.py inside bench/.venv
    script = os.path.join(HERE, "onnx_vs_ort.py")
    return subprocess.run([sys.executable, script] + argv).returncode


def main():
    forwarded = forward_to_onnx_vs_ort()
    if forwarded is not None:
        return forwarded
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default=os.path.join(HERE, ".venv"))
    ap.add_argument("--onnx", action="append", metavar="FILE",
                    help="time this ONNX model against onnxruntime instead (forwarded to bench/onnx_vs_ort.py)")
    ap.add_argument("--light", nargs="?", const="", metavar="DIR",
                    help="time onnx's nine light architectures instead (forwarded to bench/onnx_vs_ort.py)")
    ap.add_argument("--target", default="auto",
                    help="xla-aot target (default: x86_64-avx512 where the CPU has AVX-512, else x86_64-avx2)")
    ap.add_argument("--models", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time ours and the peers this many times, back to back, and report the median "
                         "round (3 on a machine with noisy neighbours)")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement")
    ap.add_argument("--cpu", type=int, default=0, help="core the single-threaded runs are pinned to")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--inputs", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.target == "auto":
        args.target = default_target()
    ensure_venv(os.path.abspath(args.venv))
    import numpy as np

    sys.path.insert(0, HERE)
    selected = [m for m in args.models.split(",") if m]
    peers_on = [p for p in args.peers.split(",") if p]
    log("bench: building xla-aot (release)")
    run(["cargo", "build", "--release", "-q", "-p", "xla-aot"], cwd=ROOT)
    xla_aot = os.path.join(ROOT, "target", "release", "xla-aot")
    with tempfile.TemporaryDirectory(prefix="xla-aot-bench-") as tmp:
        vector_bits = 512 if "512" in args.target else 256
        peak = measure_peak(tmp, vector_bits, args.cpu)
        log(f"bench: single-core fp32 peak {peak:.1f} GFLOP/s")
        rows = []
        failed = []
        for name, spec, inputs in models(selected, tmp):
            out_dir = os.path.join(tmp, "out", name)
            t0 = time.perf_counter()
            run([xla_aot, "compile", spec, "--target", args.target, "--out-dir", out_dir])
            compile_s = time.perf_counter() - t0
            manifest = json.load(open(os.path.join(out_dir, f"{name}.json")))
            exe = os.path.join(out_dir, "bench")
            run(["cc", "-O2", f"-DMODEL={name}", "-I", os.path.join(ROOT, "runtime-min", "include"),
                 os.path.join(HERE, "harness.c"), os.path.join(out_dir, f"lib{name}.a"), "-lpthread",
                 "-o", exe])
            xs = [np.load(p) for p in inputs]
            argv = []
            for i, (p, x) in enumerate(zip(inputs, xs)):
                b = os.path.join(out_dir, f"in{i}.bin")
                np.ascontiguousarray(x).tofile(b)
                argv += [b, str(x.nbytes)]
            outs = manifest["outputs"]
            for i, o in enumerate(outs):
                argv += [os.path.join(out_dir, f"out{i}.bin"), str(4 * int(np.prod(o["shape"])))]
            head = [str(manifest["arena_size"]), str(len(xs)), str(len(outs))]

            def ours(threads, pin):
                cmd = [exe, str(threads), str(args.seconds)] + head + argv
                r = json.loads(run(pinned(cmd, args.cpu) if pin else cmd))
                ys = [np.fromfile(os.path.join(out_dir, f"out{i}.bin"), dtype=np.float32).reshape(o["shape"])
                      for i, o in enumerate(outs)]
                return r, ys

            row = {"model": name, "flops": manifest["flops"], "compile_s": compile_s,
                   "kernels": manifest["kernel_count"]}
            # Each round times ours and every peer back to back; with --rounds > 1 each figure is
            # the round whose median is the median of the rounds, so a burst of load from the
            # machine's neighbours during one measurement does not decide a ratio.
            timings = {}
            for rnd in range(args.rounds):
                tag = f" (round {rnd + 1} of {args.rounds})" if args.rounds > 1 else ""
                log(f"bench: {name}: ours{tag}")
                mine, ys = ours(1, True)
                timings.setdefault("ours", []).append(mine)
                if name.startswith("gemm"):
                    two, ys2 = ours(2, False)
                    timings.setdefault("ours_2t", []).append(two)
                    if any(np.max(np.abs(a - b)) != 0 for a, b in zip(ys, ys2)):
                        failed.append(f"{name}: 2 threads give different bits")
                for p in peers_on:
                    log(f"bench: {name}: {p}{tag}")
                    npz = os.path.join(out_dir, f"{p}.npz")
                    env = dict(os.environ, **ONE_THREAD_ENV)
                    cmd = [sys.executable, os.path.abspath(__file__), "--worker", p, "--spec", spec,
                           "--inputs", ",".join(inputs), "--out", npz, "--seconds", str(args.seconds)]
                    r = json.loads(run(pinned(cmd, args.cpu), env=env).strip().splitlines()[-1])
                    got = np.load(npz)
                    for i, y in enumerate(ys):
                        g = got[f"arr_{i}"].reshape(y.shape)
                        err = float(np.max(np.abs(g - y)))
                        tol = 2e-4 * max(1.0, float(np.max(np.abs(y))))
                        if not err <= tol:
                            failed.append(f"{name}: {p} output {i} differs from ours by {err:.3g} (tolerance {tol:.3g})")
                    timings.setdefault(p, []).append(r)
            for key, rs in timings.items():
                row[key] = sorted(rs, key=lambda r: r["median_ns"])[(len(rs) - 1) // 2]
            rows.append(row)
    report(rows, peak, args, failed)
    return 1 if failed else 0


def report(rows, peak, args, failed):
    import platform

    us = lambda r: r["median_ns"] / 1e3  # noqa: E731
    peers_on = [p for p in PEERS if any(p in r for r in rows)]
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lines = []
    lines.append(f"machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
                 f"target {args.target}; single-core peak {peak:.1f} GFLOP/s (bench/peak.c); "
                 f"{time.strftime('%Y-%m-%d')}")
    head = ["model", "MFLOP", "ours µs (min)"] + [f"{p} µs" for p in peers_on] + \
           ["best peer", "ours/best", "GFLOP/s", "% peak", "2 threads µs", "compile s"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    goals = []
    for r in rows:
        best_p = min((p for p in peers_on if p in r), key=lambda p: r[p]["median_ns"], default=None)
        ratio = r["ours"]["median_ns"] / r[best_p]["median_ns"] if best_p else float("nan")
        gflops = r["flops"] / r["ours"]["median_ns"]
        cells = [r["model"], f"{r['flops'] / 1e6:.2f}", f"{us(r['ours']):.1f} ({r['ours']['min_ns'] / 1e3:.1f})"]
        cells += [f"{us(r[p]):.1f}" if p in r else "-" for p in peers_on]
        cells += [best_p or "-", f"{ratio:.3f}", f"{gflops:.1f}", f"{100 * gflops / peak:.0f}%",
                  f"{us(r['ours_2t']):.1f}" if "ours_2t" in r else "-", f"{r['compile_s']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
        if r["model"] in GOALS and best_p:
            goals.append((f"{r['model']}: ours/best {ratio:.3f} <= {GOALS[r['model']]}", ratio <= GOALS[r["model"]]))
        if not r["model"].startswith("gemm"):
            goals.append((f"{r['model']}: compile {r['compile_s']:.2f} s <= {COMPILE_SECONDS} s",
                          r["compile_s"] <= COMPILE_SECONDS))
        if r["model"] == GEMM_GOAL_MODEL:
            blas = [r[p]["median_ns"] for p in ("xla", "numpy") if p in r]
            if blas:
                speed = min(blas) / r["ours"]["median_ns"]
                goals.append((f"{r['model']}: {speed:.2f}x the best of XLA and OpenBLAS >= {GEMM_VS_BEST}",
                              speed >= GEMM_VS_BEST))
            goals.append((f"{r['model']}: {100 * gflops / peak:.0f}% of peak >= {100 * GEMM_PEAK:.0f}%",
                          gflops / peak >= GEMM_PEAK))
            if "ours_2t" in r:
                sp = r["ours"]["median_ns"] / r["ours_2t"]["median_ns"]
                goals.append((f"{r['model']}: 2 threads {sp:.2f}x one >= {GEMM_THREADS}", sp >= GEMM_THREADS))
    text = "\n".join(lines)
    print(text)
    print()
    for g, ok in goals:
        print(f"{'PASS' if ok else 'MISS'}  {g}")
    for f in failed:
        print(f"FAIL  {f}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n\n" + "\n".join(f"- {'PASS' if ok else 'MISS'} {g}" for g, ok in goals) + "\n")


if __name__ == "__main__":
    sys.exit(main())
