#!/usr/bin/env python3
"""Certificates (issue 42): the innermost loop of each compute-heavy kernel through llvm-mca, on
the core models closest to the Arm cores our users name; cycles per iteration and the share of
that core model's multiply-accumulate peak.

    .venv/bin/python bench/arm_mca.py                       # the example models, every core model
    .venv/bin/python bench/arm_mca.py --models ds_cnn --cores neoverse-n1,cortex-m4
    .venv/bin/python bench/arm_mca.py --model kws=/path/kws.onnx
    bench/arm.sh                                            # runs this after the counts

Contract. For each model and core model, the model is compiled for the xla-aot target in CORES
with `--dump-to DIR` and DIR/<name>.s (the target assembly of the whole library) is read:
  * kernels: the manifest's kernels whose flops are at least COMPUTE_SHARE of the model's (with
    their outlined parts, `<kernel>.task`, the body a parallel-for hook runs);
  * innermost loops: within a kernel's functions, a label L and a later branch back to L bound a
    loop; a loop that contains no other loop is innermost. The certificate takes the innermost
    loop with the most multiply-accumulate lanes (the main vector loop rather than its remainder);
    a kernel without one is reported as such;
  * the loop's instructions (labels and directives dropped; its branches kept) go to
    `llvm-mca-19 -mtriple=T -mcpu=C -iterations=ITERATIONS`; cycles/iter = Total Cycles /
    Iterations (the steady state of the loop as a whole, its branch taken every time);
  * macs/iter counts multiply-accumulate lanes: fmla/fmadd/vfma/vmla and friends (each vector lane
    one), sdot/udot (four per 32-bit lane), smlad (two), MVE vmladav (one per byte or halfword
    lane), and a multiply and an add of the same width as one (min of the two counts: LLVM splits
    an f32 multiply-add into vmul + vadd where it may not contract);
  * peak: the MACs per cycle that the same llvm-mca core model gives a block of independent
    multiply-accumulate chains of the loop's kind (f32: fmla .4s on aarch64, vfma.f32 on s
    registers and, with Helium, on q registers; int8: sdot, smlad, vmladava.s8), so the
    percentage is the loop against the best the same model allows. The peaks are printed
    (`mca-peak` lines) next to the published figures PUBLISHED_PEAKS quotes.
Lines: `mca MODEL CORE KERNEL cycles/iter=C macs/iter=M macs/cycle=R peak=P(kind) pct=Q% insns/iter=N`,
or `mca MODEL CORE KERNEL shares-code` (a kernel identical to an earlier one calls its function)
or `no-mac-loop`. Instructions a core model has no scheduling data for are skipped (llvm-mca's
-skip-unsupported-instructions=lack-sched) and the line says so.
These are static estimates from LLVM's scheduling models (no caches, no memory latency, perfect
branch prediction), not measurements and not times. Not run by scripts/test.sh or CI.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arm_bench import MODELS, ROOT, find_compiler  # noqa: E402

MCA = "llvm-mca-19"

# A kernel is certified when it does at least this share of the model's flops: the others are
# glue (softmax, pooling, a bias) whose loops carry no multiply-accumulate.
COMPUTE_SHARE = 0.05

# llvm-mca iterations: enough that the first iteration's fill is under 1% of the total.
ITERATIONS = 1000


@dataclass(frozen=True)
class McaCore:
    """An llvm-mca core model and the xla-aot target whose code it judges."""

    label: str
    target: str
    triple: str
    cpu: str
    aarch64: bool
    mve: bool = False


CORES = [
    # Closest LLVM model to the A76/A78-class cores (Jetson Orin's A78AE, Raspberry Pi 5's A76):
    # LLVM's cortex-a76/a78 names fall back to the A57 model (issue 42).
    McaCore("neoverse-n1", "aarch64-a78", "aarch64", "neoverse-n1", True),
    # Closest to the Raspberry Pi 4's Cortex-A72 (LLVM's cortex-a72 uses the A57 model).
    McaCore("cortex-a57", "aarch64-neon", "aarch64", "cortex-a57", True),
    McaCore("cortex-m4", "cortex-m4f", "thumbv7em-none-eabihf", "cortex-m4", False),
    McaCore("cortex-m7", "cortex-m7", "thumbv7em-none-eabihf", "cortex-m7", False),
    McaCore("cortex-m55", "cortex-m55", "thumbv8.1m.main-none-eabihf", "cortex-m55", False, True),
]

# Published f32 multiply-accumulate peaks per cycle, quoted beside the models' (the percentages
# use the model's, so that a loop is judged by the same model as its peak).
PUBLISHED_PEAKS = {
    "neoverse-n1": "8 (Arm Neoverse N1 Software Optimization Guide: FMLA (vector) throughput 2/cycle, 4 lanes)",
    "cortex-a57": "4 (Arm Cortex-A57 Software Optimization Guide: FMLA Q-form throughput 1/cycle)",
    "cortex-m4": "1/3 (Cortex-M4 TRM, FPU instruction timing: VFMA.F32 3 cycles; VMUL 1 + VADD 1 give 1/2)",
    "cortex-m7": "- (not quoted here)",
    "cortex-m55": "- (not quoted here)",
}


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


# --- multiply-accumulate lanes --------------------------------------------------------------

A64_LANES = {"4s": 4, "2s": 2, "8h": 8, "4h": 4, "2d": 2, "16b": 16, "8b": 8}


def a64_macs(lines: list[str]) -> tuple[int, str]:
    """(MAC lanes, kind 'f32'|'i8'|'') of aarch64 instructions."""
    fma = mul = add = 0
    i8 = 0
    for ln in lines:
        op, _, rest = ln.partition(" ")
        rest = rest.strip()
        first = rest.split(",")[0]
        m = re.search(r"\.(\d+[bhsd])", first)
        lanes = A64_LANES.get(m.group(1), 1) if m else 1
        if op in ("fmla", "fmls"):
            fma += lanes
        elif op in ("fmadd", "fmsub", "fnmadd", "fnmsub"):
            fma += 1
        elif op in ("sdot", "udot", "usdot"):
            i8 += 4 * lanes
        elif op in ("smlal", "smlal2", "umlal", "umlal2", "mla", "smlsl", "smlsl2"):
            i8 += lanes
        elif op == "fmul":
            mul += lanes
        elif op == "fadd":
            add += lanes
    if i8:
        return i8, "i8"
    total = fma + min(mul, add)
    return total, ("f32" if total else "")


def thumb_macs(lines: list[str]) -> tuple[int, str]:
    """(MAC lanes, kind) of Thumb-2 / Helium instructions."""
    fma = mul = add = 0
    i8 = 0
    for ln in lines:
        op, _, rest = ln.partition(" ")
        op = op.strip().lower()
        q = bool(re.search(r"\bq\d", rest))
        base = re.sub(r"(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)?(\.\w+)*$", "", op)
        flanes = 4 if q else 1
        if op.endswith(".f16") and q:
            flanes = 8
        if re.match(r"vf?(ma|ms|nma|nms)s?\.f(32|16)$", op) or re.match(r"vml[as]\.f(32|16)$", op):
            fma += flanes
        elif op.startswith("vmul.f"):
            mul += flanes
        elif op.startswith("vadd.f"):
            add += flanes
        elif re.match(r"vml(a|s)(d|l)?(a)?v(a)?(x)?\.[su]8$", op) or re.match(r"vmla(s)?\.[siu]8$", op):
            i8 += 16
        elif re.match(r"vml(a|s)(d|l)?(a)?v(a)?(x)?\.[su]16$", op) or re.match(r"vmla(s)?\.[siu]16$", op):
            i8 += 8
        elif base in ("smlad", "smladx", "smlsd", "smlsdx", "smlald", "smlaldx"):
            i8 += 2
        elif base in ("smlabb", "smlabt", "smlatb", "smlatt", "mla", "smlal", "umlal"):
            i8 += 1
    if i8:
        return i8, "i8"
    total = fma + min(mul, add)
    return total, ("f32" if total else "")


# --- llvm-mca -------------------------------------------------------------------------------


def mca_cycles(core: McaCore, body: list[str], work: Path, tag: str) -> tuple[float, str]:
    """(cycles per iteration, llvm-mca's full report) of `body` on `core`."""
    src = work / f"{tag}.s"
    src.write_text("\n".join(body) + "\n")
    cmd = [MCA, f"-mtriple={core.triple}", f"-mcpu={core.cpu}", f"-iterations={ITERATIONS}"]
    if core.aarch64 and core.cpu == "neoverse-n1":
        cmd.append("-mattr=+dotprod")
    try:
        r = run(cmd + [str(src)])
    except RuntimeError as e:
        if "unsupported instruction" not in str(e):
            raise
        # A core model without scheduling data for an instruction (LLVM 19's Cortex-M7 model
        # lacks vcmp.f32 with #0): drop those instructions, and say so.
        r = run(cmd + ["-skip-unsupported-instructions=lack-sched", str(src)])
        r.stdout = "SKIPPED-UNSUPPORTED\n" + r.stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", r.stdout).group(1))
    iters = int(re.search(r"Iterations:\s+(\d+)", r.stdout).group(1))
    return cycles / iters, r.stdout


def peak_blocks(core: McaCore) -> dict[str, tuple[list[str], int]]:
    """Independent multiply-accumulate chains per kind: (instructions, MAC lanes per block)."""
    if core.aarch64:
        blocks = {"f32": ([f"fmla v{i}.4s, v30.4s, v31.4s" for i in range(16)], 16 * 4)}
        if core.cpu == "neoverse-n1":  # the dot-product extension (Armv8.2 cores)
            blocks["i8"] = ([f"sdot v{i}.4s, v30.16b, v31.16b" for i in range(16)], 16 * 16)
        return blocks
    f32 = [f"vfma.f32 s{i}, s30, s31" for i in range(16)]
    blocks = {"f32": (f32, 16), "i8": ([f"smlad r{i}, r10, r11, r{i}" for i in range(8)], 8 * 2)}
    if core.mve:
        blocks["f32-mve"] = ([f"vfma.f32 q{i}, q6, q7" for i in range(6)], 6 * 4)
        # vmladava.s8 accumulates into an even general register; four independent chains.
        blocks["i8-mve"] = ([f"vmladava.s8 r{2 * i}, q{i}, q{i + 4}" for i in range(4)], 4 * 16)
    return blocks


def peaks(core: McaCore, work: Path) -> dict[str, float]:
    """MACs per cycle per kind ('f32', 'i8'): the best block of that kind."""
    out: dict[str, float] = {}
    for kind, (body, macs) in peak_blocks(core).items():
        try:
            cyc, _ = mca_cycles(core, body, work, f"peak-{core.label}-{kind}")
        except RuntimeError as e:
            print(f"# {core.label}: peak block {kind} not accepted by llvm-mca: {str(e)[:200]}")
            continue
        k = kind.split("-")[0]
        out[k] = max(out.get(k, 0.0), macs / cyc)
    return out


# --- assembly -------------------------------------------------------------------------------


def functions(asm: str) -> dict[str, list[str]]:
    """Function name -> its lines (from its label to the next function's), from LLVM's output."""
    out: dict[str, list[str]] = {}
    current = None
    for line in asm.splitlines():
        m = re.match(r"^([A-Za-z_][\w.$]*):", line)
        if m and not m.group(1).startswith(".L"):
            current = m.group(1)
            out[current] = []
            continue
        if current is not None:
            out[current].append(line)
    return out


def instructions(lines: list[str]) -> list[str]:
    out = []
    for ln in lines:
        s = re.split(r"\s[@/]{1,2}\s|\t@|//", ln)[0].strip()
        if not s or s.endswith(":") or s.startswith("."):
            continue
        out.append(re.sub(r"\s+", " ", s))
    return out


def branch_target(line: str) -> str | None:
    """The `.L` label a branch instruction jumps to (b, b.cond, bcc(.w), cbz/cbnz, tbz/tbnz, the
    low-overhead loop ends le/letp), else None."""
    m = re.match(r"^\s*([a-z][\w.]*)\s+(.*?)\s*(?:[@/]{1,2}.*)?$", line)
    if not m:
        return None
    op, last = m.group(1), m.group(2).split(",")[-1].strip()
    if not re.fullmatch(r"\.L\w+", last):
        return None
    if op.startswith("b") or op in ("cbz", "cbnz", "tbz", "tbnz", "le", "letp"):
        return last
    return None


def innermost_loops(lines: list[str]) -> list[list[str]]:
    """The bodies (raw lines, label to back branch) of loops that contain no other loop."""
    labels = {}
    for i, ln in enumerate(lines):
        m = re.match(r"^(\.L\w+):", ln)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, ln in enumerate(lines):
        t = branch_target(ln)
        if t in labels and labels[t] < i:
            loops.append((labels[t], i))
    inner = [
        (a, b) for (a, b) in loops
        if not any((c, d) != (a, b) and a <= c and d <= b for (c, d) in loops)
    ]
    return [lines[a : b + 1] for a, b in inner]


def compile_dump(xla: str, spec: Path, target: str, work: Path) -> tuple[dict, str]:
    out = work / "lib"
    dump = work / "dump"
    for d in (out, dump):
        if d.exists():
            shutil.rmtree(d)
    run(["nice", "-n", "10", xla, "compile", str(spec), "--target", target, "--out-dir", str(out),
         "--dump-to", str(dump)])
    manifest = json.loads(next(out.glob("*.json")).read_text())
    return manifest, (dump / f"{manifest['name']}.s").read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--cores", default=",".join(c.label for c in CORES))
    ap.add_argument("--work", default=str(ROOT / "target" / "arm-mca"))
    ap.add_argument("--show", action="store_true", help="also print each certified loop")
    args = ap.parse_args()
    if not shutil.which(MCA):
        sys.exit(f"{MCA} not found: apt-get install llvm-19")
    models = {m: MODELS[m] for m in args.models.split(",") if m}
    for m in args.model:
        name, _, path = m.partition("=")
        models[name] = Path(path).resolve()
    wanted = set(args.cores.split(","))
    cores = [c for c in CORES if c.label in wanted]
    xla = find_compiler()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    core_peaks = {}
    for core in cores:
        core_peaks[core.label] = peaks(core, work)
        p = " ".join(f"{k}={v:.3g}" for k, v in core_peaks[core.label].items())
        print(f"mca-peak {core.label} macs/cycle {p} (llvm-mca {core.triple} -mcpu={core.cpu}); "
              f"published f32: {PUBLISHED_PEAKS[core.label]}", flush=True)
    for name, spec in models.items():
        for core in cores:
            w = work / f"{name}-{core.label}"
            w.mkdir(parents=True, exist_ok=True)
            try:
                manifest, asm = compile_dump(xla, spec, core.target, w)
            except RuntimeError as e:
                print(f"# {name} {core.label}: compile failed: {str(e)[:300]}")
                continue
            funcs = functions(asm)
            kernels = manifest.get("kernels", [])
            total_flops = sum(k.get("flops", 0) for k in kernels) or 1
            for k in kernels:
                if k.get("flops", 0) < COMPUTE_SHARE * total_flops:
                    continue
                parts = [f for f in funcs if f == k["name"] or f.startswith(k["name"] + ".")]
                best = None
                for f in parts:
                    for loop in innermost_loops(funcs[f]):
                        body = instructions(loop)
                        macs, kind = (a64_macs if core.aarch64 else thumb_macs)(body)
                        if macs and (best is None or macs > best[0]):
                            best = (macs, kind, body)
                if not parts:
                    print(f"mca {name} {core.label} {k['name']} shares-code (no function of its "
                          f"own: it calls an identical kernel's)", flush=True)
                    continue
                if best is None:
                    print(f"mca {name} {core.label} {k['name']} no-mac-loop "
                          f"(flops share {k['flops'] / total_flops:.0%})", flush=True)
                    continue
                macs, kind, body = best
                try:
                    cyc, report = mca_cycles(core, body, w, k["name"])
                except RuntimeError as e:
                    print(f"mca {name} {core.label} {k['name']} llvm-mca-failed {str(e)[:300]}")
                    continue
                peak = core_peaks[core.label].get(kind)
                rate = macs / cyc
                pct = f"{100 * rate / peak:.0f}%" if peak else "-"
                print(f"mca {name} {core.label} {k['name']} cycles/iter={cyc:.2f} macs/iter={macs} "
                      f"macs/cycle={rate:.3g} peak={f'{peak:.3g}' if peak else '-'}({kind}) pct={pct} "
                      f"insns/iter={len(body)}"
                      + (" (instructions without scheduling data skipped)"
                         if report.startswith("SKIPPED-UNSUPPORTED") else ""), flush=True)
                if args.show:
                    for ln in body:
                        print(f"#   {ln}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
