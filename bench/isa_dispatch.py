#!/usr/bin/env python3
"""Per-call overhead of an x86_64-multi library's run-time dispatch against the single-ISA
library of the variant it selects (issue 21 asks for <= 5 ns), and the archive sizes.

    python3 bench/isa_dispatch.py                      # uses target/release or target/debug xla-aot
    python3 bench/isa_dispatch.py --seconds 0.5 --rounds 7 --pairs 5

For a tiny model (`add` of 16 floats: the call is almost all overhead) and the four examples it
compiles the multi-ISA library and the single-ISA library of the variant the multi-ISA one
selects here, links each with bench/isa_dispatch.c, then runs the two alternately --pairs
times (each run: the best of --rounds rounds of back-to-back calls, as many as take about
--seconds, at most --calls) and prints the best ns per call of each, their difference and
ratio. Only the tiny model resolves a few nanoseconds; the examples show that the dispatch is
lost in their run-to-run noise. The generated code does not depend on how
xla-aot itself was built, so a debug build of the compiler measures the same libraries.
It also prints each multi-ISA archive's size against the sum of the three single-ISA archives
(x86_64-avx512, x86_64-avx2, x86_64).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = """HloModule tiny

ENTRY %main {
  %x = f32[16]{0} parameter(0)
  %y = f32[16]{0} add(%x, %x)
  ROOT %outputs = (f32[16]{0}) tuple(%y)
}
"""
SINGLE = ["x86_64-avx512", "x86_64-avx2", "x86_64"]
SINGLE_OF = {"avx512": "x86_64-avx512", "avx2": "x86_64-avx2", "sse2": "x86_64"}


def compiler(arg):
    if arg:
        return arg
    for profile in ("release", "debug"):
        p = os.path.join(REPO, "target", profile, "xla-aot")
        if os.path.exists(p):
            return p
    sys.exit("build xla-aot first (cargo build -p xla-aot) or pass --xla-aot")


def compile_lib(xla_aot, spec, target, out):
    subprocess.run([xla_aot, "compile", spec, "--target", target, "--out-dir", out],
                   check=True, capture_output=True)
    with open(next(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".json"))) as f:
        return json.load(f)


def link(out, manifest, multi):
    name = manifest["name"]
    exe = os.path.join(out, "isa_dispatch")
    cmd = ["cc", "-O2", "-std=c11", f"-DMODEL={name}", os.path.join(REPO, "bench/isa_dispatch.c"),
           os.path.join(out, f"lib{name}.a"), "-o", exe]
    if multi:
        cmd.insert(3, "-DMULTI_ISA")
    subprocess.run(cmd, check=True)
    return exe


def run(exe, manifest, args):
    size = lambda t: 4 * max(1, __import__("math").prod(t["shape"]))  # noqa: E731
    r = subprocess.run([exe, str(manifest["arena_size"]), str(args.calls), str(args.rounds),
                        str(size(manifest["inputs"][0])), str(size(manifest["outputs"][0]))],
                       check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xla-aot")
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--seconds", type=float, default=0.2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--models", default="tiny,simplenet,mlp,mobilenet_block,tiny_transformer")
    args = ap.parse_args()
    xla_aot = compiler(args.xla_aot)
    tmp = tempfile.mkdtemp(prefix="isa-dispatch-")
    tiny = os.path.join(tmp, "tiny.hlo.txt")
    with open(tiny, "w") as f:
        f.write(TINY)
    print(f"{'model':18} {'isa':7} {'single ns':>10} {'multi ns':>10} {'diff ns':>8} {'ratio':>6}"
          f" {'multi .a':>10} {'sum of 3 .a':>12}", flush=True)
    for model in args.models.split(","):
        spec = tiny if model == "tiny" else os.path.join(REPO, "examples", model, "model.yaml")
        if model != "tiny" and len(compile_lib(xla_aot, spec, "x86_64", os.path.join(tmp, "probe"))["inputs"]) != 1:
            continue
        mdir = os.path.join(tmp, model, "multi")
        mm = compile_lib(xla_aot, spec, "x86_64-multi", mdir)
        mexe = link(mdir, mm, True)
        probe = run(mexe, mm, argparse.Namespace(calls=1000, rounds=1))
        isa = probe["isa"]
        calls = int(min(args.calls, max(100, args.seconds * 1e9 / probe["ns_per_call"])))
        timed = argparse.Namespace(calls=calls, rounds=args.rounds)
        sizes = {}
        for t in SINGLE:
            d = os.path.join(tmp, model, t)
            sm = compile_lib(xla_aot, spec, t, d)
            sizes[t] = os.path.getsize(os.path.join(d, f"lib{sm['name']}.a"))
            if t == SINGLE_OF[isa]:
                sexe = link(d, sm, False)
                single_manifest = sm
        single, multi = [], []
        for _ in range(args.pairs):
            single.append(run(sexe, single_manifest, timed)["ns_per_call"])
            multi.append(run(mexe, mm, timed)["ns_per_call"])
        s, m = min(single), min(multi)
        msize = os.path.getsize(os.path.join(mdir, f"lib{mm['name']}.a"))
        print(f"{model:18} {isa:7} {s:10.2f} {m:10.2f} {m - s:8.2f} {m / s:6.3f} {msize:10} {sum(sizes.values()):12}", flush=True)


if __name__ == "__main__":
    main()
