#!/usr/bin/env python3
"""onnxruntime's instructions per inference on aarch64, counted under qemu-aarch64 with our TCG
plugin: the `peer=` figures of bench/arm_bench.py's aarch64 rows (issue 42, item 2).

    bench/ort_aarch64.sh                                   # every model, both cores
    bench/ort_aarch64.sh --models squeezenet,shufflenet --cores aarch64-a78
    .venv/bin/python bench/ort_aarch64.py --list           # the models found, NAME PATH
    bench/arm.sh $(.venv/bin/python bench/ort_aarch64.py --arm-bench-args) \\
        --models '' --cores aarch64-neon,aarch64-a78       # our side, same model files

What it installs (cached, rebuilt when its stamp changes):
  * target/arm64-root: an arm64 Debian python3.11 userland (`dpkg --add-architecture arm64`,
    `apt-get update` when needed, `apt-get download` of DEBS, `dpkg -x` each into the folder),
    with numpy and onnxruntime's aarch64 wheels (`pip download --only-binary=:all: --platform
    manylinux_2_28_aarch64 --python-version 3.11 --implementation cp`, the versions of
    ORT_VERSION / NUMPY_VERSION and their pure-Python dependencies) unzipped into
    ROOT/usr/lib/python3.11/site-packages, and everything byte-compiled by this (3.11) Python so
    that the emulated runs write nothing. Stamp: ROOT/.stamp.
  * target/ort-aarch64/models: the models not found elsewhere, made on this host with the
    .venv's onnx/onnxruntime: resnet50 and shufflenet QDQ with int8 activations
    (scripts/onnx_quantized.py's `static`: quantize_static, per-channel int8 weights, 4 seeded
    calibration inputs), and MLPerf Tiny's float visual-wake-words MobileNet converted by tf2onnx
    (pip-installed with --no-deps into target/ort-aarch64/tf2onnx; its dependencies are the
    .venv's) with the batch fixed at 1, and that model QDQ-quantized the same way (int8
    activations). vww is skipped with a note when target/mlperf-tiny/vww_96_float/model.tflite
    (bench/mlperf_tiny.py) or tf2onnx is missing.

What it expects: qemu-aarch64 (apt qemu-user), `unshare` and `mount` with the right to make a
private mount namespace (root), the plugin (scripts/build_qemu_plugin.sh; bench/ort_aarch64.sh
builds it), the .venv's python with onnx and onnxruntime (for the models it makes), and onnx's
light models in $XLA_AOT_ONNX_LIGHT_DIR or target/onnx-light and the quantized ones in
$XLA_AOT_ONNX_QUANT_DIR or target/onnx-quantized (scripts/test.sh writes both). A model not
found is skipped with a note.

What it counts. For each model and core, `qemu-aarch64 -cpu <cpu> -plugin <plugin>` runs the
arm64 python3.11 on this file's guest part: it imports numpy and onnxruntime, creates one session
(CPUExecutionProvider, intra_op_num_threads = inter_op_num_threads = 1, sequential execution,
default graph optimisations), runs one warm-up inference, then N more (RUNS = 1 or 1 + N), and
prints a checksum of the output. Session creation and the warm-up are in both runs, so with
--reps repetitions of each count,

    ort = (min count(1 + N) - min count(1)) / N

is one steady inference through onnxruntime's Python API: `session.run`, binding the numpy
inputs and making the output arrays included (about 0.38 M instructions per call for a one-node
Identity model: onnxruntime's and pybind's fixed cost per call, which matters for vww only).
The minimum, not a median of the per-repetition quotients: a run now and then executes 10 to 20
M more instructions, once, inside onnxruntime's library during session creation or the first
inference (in either count, more often when the host is loaded, with or without host ASLR),
while the runs without it agree within about 0.01 %; the minimum of each count drops that
one-sided noise. The JSON keeps every count and the median of the per-repetition quotients.
onnxruntime's cpuinfo library reads /proc/cpuinfo, which under qemu-user is the host's (x86) and
crashes it, so each run is in a private mount namespace (`unshare -m`) with an aarch64 cpuinfo
text bind-mounted over /proc/cpuinfo, matching the emulated core (CORES): aarch64-neon is
`-cpu cortex-a72` (CPU part 0xd08, no `asimddp`), aarch64-a78 is `-cpu neoverse-n1` (CPU part
0xd0c, `asimddp`), as bench/arm_bench.py runs our code. onnxruntime's kernels follow the CPU's
HWCAP bits, which qemu sets from -cpu: NEON float kernels on both, sdot/udot int8 kernels on
aarch64-a78 only. Every figure is a count of executed instructions under QEMU's TCG, a proxy
for work, never a time.

Output: `# ...` detail lines (each count), and one line per model and core:

    ort-aarch64 MODEL CORE insns=N

and target/ort-aarch64.json (merged with what an earlier run wrote): {"models": {MODEL: {"path":
..., CORE: {"insns": N, "median": ..., "samples": [...], "count_1": [...], "count_1n": [...],
"cpu": ...}}}, ...}. bench/arm_bench.py reads it for the peer column of its aarch64 rows; MODEL is the model
file's stem, which is the name --arm-bench-args gives arm_bench and the library name
arm_bench falls back to. Not part of scripts/test.sh or CI.
"""
from __future__ import annotations

import os
import sys

# --- guest side: runs under qemu-aarch64 in the arm64 python; keep its imports minimal ----------


def guest(model: str, runs: int) -> int:
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    d = os.path.dirname(model)
    types = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
    for j, i in enumerate(s.get_inputs()):
        shape = [x if isinstance(x, int) else 1 for x in i.shape]
        f = os.path.join(d, f"input_{j}.npy")
        x = np.load(f) if os.path.exists(f) else None
        dt = types[i.type]
        if x is None or list(x.shape) != shape or x.dtype != dt:
            x = np.random.default_rng(j).standard_normal(shape).astype(np.float32)
            if dt != np.float32:
                x = np.clip(x * 40, np.iinfo(dt).min, np.iinfo(dt).max).astype(dt)
        feeds[i.name] = x
    out = None
    for _ in range(runs):
        out = s.run(None, feeds)
    print("ok", float(np.asarray(out[0], dtype=np.float64).sum()), flush=True)
    return 0


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--guest":
    sys.exit(guest(sys.argv[2], int(sys.argv[3])))

# --- host side ---------------------------------------------------------------------------------

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import zipfile  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "target"

ORT_VERSION = "1.32.0"
NUMPY_VERSION = "2.4.6"
# arm64 packages of Debian's python3.11 and the libraries it, numpy and onnxruntime load.
DEBS = [
    "python3.11", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
    "libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libexpat1", "libffi8", "libssl3",
    "libbz2-1.0", "liblzma5", "libsqlite3-0", "libncursesw6", "libtinfo6", "libreadline8",
    "libuuid1", "libdb5.3", "libcrypt1", "libnsl2", "libtirpc3", "libgomp1",
    "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0", "libkeyutils1",
    "libcom-err2",
]
STAMP = f"debs={','.join(DEBS)} onnxruntime={ORT_VERSION} numpy={NUMPY_VERSION} layout=1"
SITE = "usr/lib/python3.11/site-packages"
# A run that takes longer is stuck (resnet50's 1 + 3 inferences take minutes).
QEMU_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Core:
    label: str  # bench/arm_bench.py's core label
    cpu: str  # qemu-aarch64 -cpu
    part: str  # /proc/cpuinfo "CPU part"
    variant: str
    revision: str
    features: str  # /proc/cpuinfo "Features" (the kernel's names of the HWCAP bits)


CORES = {
    c.label: c
    for c in [
        # Cortex-A72: Armv8.0, NEON, no dot product (as bench/arm_bench.py's aarch64-neon).
        Core("aarch64-neon", "cortex-a72", "0xd08", "0x0", "3",
             "fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid"),
        # Neoverse N1 (QEMU 7.2 has no Cortex-A78): Armv8.2 with dotprod and fp16.
        Core("aarch64-a78", "neoverse-n1", "0xd0c", "0x3", "1",
             "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
             "lrcpc dcpop asimddp ssbs"),
    ]
}


def log(msg: str) -> None:
    print(f"# {msg}", flush=True)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n"
                           f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


# --- the arm64 userland ------------------------------------------------------------------------


def setup_root(root: Path) -> None:
    stamp = root / ".stamp"
    if stamp.exists() and stamp.read_text().strip() == STAMP:
        return
    log(f"setting up {root} ({STAMP})")
    if "arm64" not in run(["dpkg", "--print-foreign-architectures"]).stdout.split():
        run(["dpkg", "--add-architecture", "arm64"])
        run(["apt-get", "update", "-qq"])
    dl = root.with_name(root.name + ".dl")
    tmp = root.with_name(root.name + ".tmp")
    for d in (dl, tmp):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    pkgs = [f"{p}:arm64" for p in DEBS]
    r = subprocess.run(["apt-get", "download", *pkgs], cwd=dl, capture_output=True, text=True)
    if r.returncode != 0:  # stale lists
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "download", *pkgs], cwd=dl)
    for deb in sorted(dl.glob("*.deb")):
        run(["dpkg", "-x", deb, tmp])
    wheels = dl / "wheels"
    run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
         "--platform", "manylinux_2_28_aarch64", "--python-version", "3.11", "--implementation", "cp",
         "-d", wheels, f"onnxruntime=={ORT_VERSION}", f"numpy=={NUMPY_VERSION}"])
    site = tmp / SITE
    site.mkdir(parents=True, exist_ok=True)
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
    # The emulated runs must write nothing (a new __pycache__ folder would land on the host's
    # path: qemu's -L looks a path up in ROOT only when it exists there). This Python is 3.11:
    # the same bytecode magic as the guest's 3.11.
    if sys.version_info[:2] == (3, 11):
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                        tmp / "usr/lib/python3.11"], capture_output=True)
    else:
        log(f"host Python is {sys.version.split()[0]}, not 3.11: the guest compiles its modules "
            "on every run (the same in both counts, so they still cancel)")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    shutil.rmtree(dl, ignore_errors=True)
    stamp.write_text(STAMP + "\n")


# --- models ------------------------------------------------------------------------------------


def light_dir() -> Path:
    return Path(os.environ.get("XLA_AOT_ONNX_LIGHT_DIR", TARGET / "onnx-light"))


def quant_dir() -> Path:
    return Path(os.environ.get("XLA_AOT_ONNX_QUANT_DIR", TARGET / "onnx-quantized"))


MADE = TARGET / "ort-aarch64" / "models"
TF2ONNX = TARGET / "ort-aarch64" / "tf2onnx"
VWW_TFLITE = TARGET / "mlperf-tiny" / "vww_96_float" / "model.tflite"

# Smallest first: resnet50's counts take the longest.
MODEL_ORDER = [
    "vww_96_float", "vww_96_qdq_s8",
    "squeezenet", "squeezenet_qdq_u8", "squeezenet_qdq_s8",
    "shufflenet", "shufflenet_qdq_u8", "shufflenet_qdq_s8",
    "resnet50", "resnet50_qdq_s8",
]


def model_paths() -> dict[str, Path]:
    """Every model this script counts, name -> path, that exists now."""
    cand = {
        "squeezenet": light_dir() / "squeezenet" / "squeezenet.onnx",
        "shufflenet": light_dir() / "shufflenet" / "shufflenet.onnx",
        "resnet50": light_dir() / "resnet50" / "resnet50.onnx",
        "squeezenet_qdq_u8": quant_dir() / "squeezenet_qdq_u8" / "squeezenet_qdq_u8.onnx",
        "squeezenet_qdq_s8": quant_dir() / "squeezenet_qdq_s8" / "squeezenet_qdq_s8.onnx",
        "shufflenet_qdq_u8": quant_dir() / "shufflenet_qdq_u8" / "shufflenet_qdq_u8.onnx",
    }
    for name in ("shufflenet_qdq_s8", "resnet50_qdq_s8", "vww_96_float", "vww_96_qdq_s8"):
        p = quant_dir() / name / f"{name}.onnx"
        cand[name] = p if p.exists() else MADE / name / f"{name}.onnx"
    return {m: cand[m] for m in MODEL_ORDER if cand[m].exists()}


def load_onnx_quantized():
    spec = importlib.util.spec_from_file_location("onnx_quantized", REPO / "scripts" / "onnx_quantized.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_models(want: list[str]) -> None:
    """Makes the models of `want` that model_paths() does not find (see the module doc)."""
    have = model_paths()
    todo = [m for m in ("shufflenet_qdq_s8", "resnet50_qdq_s8", "vww_96_float", "vww_96_qdq_s8")
            if m in want and m not in have]
    if not todo:
        return
    import numpy as np
    import onnx
    import onnxruntime as ort
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's per-weight notes
    oq = load_onnx_quantized()
    oq.single_threaded(ort)
    for name in todo:
        d = MADE / name
        path = d / f"{name}.onnx"
        if name.startswith("vww"):
            flt = MADE / "vww_96_float" / "vww_96_float.onnx"
            if not flt.exists() and not make_vww_float(np, onnx, flt):
                continue
            if name == "vww_96_float":
                continue
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(flt.parent / "input_0.npy", d / "input_0.npy")
            m = onnx.load(flt)
            i = m.graph.input[0]
            shape = [x.dim_value for x in i.type.tensor_type.shape.dim]
            log(f"quantizing {flt} (QDQ, int8 activations, per-channel int8 weights)")
            oq.static(np, onnx, str(flt), str(path), "qdq", "s8", ready=(i.name, shape))
            continue
        arch = name.split("_qdq")[0]
        src = light_dir() / arch / f"{arch}.onnx"
        if not src.exists():
            log(f"{name}: skipped (no {src})")
            continue
        d.mkdir(parents=True, exist_ok=True)
        log(f"quantizing {src} (QDQ, int8 activations, per-channel int8 weights)")
        oq.static(np, onnx, str(src), str(path), "qdq", "s8")
        shutil.copy(src.parent / "input_0.npy", d / "input_0.npy")


def make_vww_float(np, onnx, dst: Path) -> bool:
    if not VWW_TFLITE.exists():
        log(f"vww: skipped (no {VWW_TFLITE}: bench/mlperf_tiny.py writes it)")
        return False
    if not (TF2ONNX / "tf2onnx").exists():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                            str(TF2ONNX), "tf2onnx"], capture_output=True, text=True)
        if r.returncode != 0:
            log(f"vww: skipped (pip install tf2onnx failed: {r.stderr.strip()[-300:]})")
            return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    raw = dst.with_suffix(".raw.onnx")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TF2ONNX), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", str(VWW_TFLITE),
                        "--output", str(raw), "--opset", "13"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        log(f"vww: skipped (tf2onnx failed: {r.stderr.strip()[-500:]})")
        return False
    # tf2onnx leaves the batch symbolic: fix it at 1 (the compiler wants static shapes).
    m = onnx.load(raw)
    for v in list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_value = 1
    del m.graph.value_info[:]
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    onnx.save(m, dst)
    raw.unlink()
    src_in = VWW_TFLITE.parent / "input_0.npy"
    if src_in.exists():
        shutil.copy(src_in, dst.parent / "input_0.npy")
    log(f"converted {VWW_TFLITE} to {dst} (tf2onnx, batch 1)")
    return True


# --- counting ----------------------------------------------------------------------------------


def cpuinfo_text(core: Core) -> str:
    n = os.cpu_count() or 1
    block = (f"BogoMIPS\t: 50.00\nFeatures\t: {core.features}\nCPU implementer\t: 0x41\n"
             f"CPU architecture: 8\nCPU variant\t: {core.variant}\nCPU part\t: {core.part}\n"
             f"CPU revision\t: {core.revision}\n\n")
    return "".join(f"processor\t: {i}\n{block}" for i in range(n))


def count(root: Path, plugin: str, core: Core, cpuinfo: Path, model: Path, runs: int,
          out: Path) -> tuple[int, str]:
    """Instructions of one emulated run of the guest with RUNS inferences, and its stdout."""
    out.unlink(missing_ok=True)
    # A fixed environment: the program's start-up reads it.
    env = {
        "PATH": "/usr/bin:/bin", "LC_ALL": "C", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONPATH": str(root / SITE),
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
    }
    cmd = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /proc/cpuinfo && exec "$@"', str(cpuinfo),
           "timeout", str(QEMU_TIMEOUT_S), "nice", "-n", "10",
           "qemu-aarch64", "-cpu", core.cpu, "-L", str(root), "-plugin", f"{plugin},out={out}",
           str(root / "usr/bin/python3.11"), "-S", str(Path(__file__).resolve()),
           "--guest", str(model), str(runs)]
    p = run(cmd, env=env)
    if not p.stdout.startswith("ok "):
        raise RuntimeError(f"{model} on {core.label}: {p.stdout[-1000:]} {p.stderr[-1000:]}")
    m = re.match(r"insns (\d+)", out.read_text())
    if not m:
        raise RuntimeError(f"{out}: no instruction count")
    return int(m.group(1)), p.stdout.strip()


def bench(root, plugin, name, model, core: Core, repeat, reps, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    cpuinfo = work / f"cpuinfo-{core.label}"
    cpuinfo.write_text(cpuinfo_text(core))
    ones, manys, samples = [], [], []
    for k in range(reps):
        a, oa = count(root, plugin, core, cpuinfo, model, 1, work / f"{name}-{core.label}-r1-{k}.insns")
        b, ob = count(root, plugin, core, cpuinfo, model, 1 + repeat,
                      work / f"{name}-{core.label}-r{1 + repeat}-{k}.insns")
        if oa != ob:
            raise RuntimeError(f"{name} on {core.label}: outputs differ ({oa} vs {ob})")
        q = (b - a) / repeat
        log(f"{name} {core.label} (qemu-aarch64 -cpu {core.cpu}) rep {k}: count(1)={a} "
            f"count({1 + repeat})={b} per inference {q:.1f} ({oa})")
        ones.append(a)
        manys.append(b)
        samples.append(q)
    return {"insns": estimate(ones, manys, repeat), "median": statistics.median(samples),
            "samples": samples, "count_1": ones, "count_1n": manys, "repeat": repeat,
            "cpu": core.cpu, "cpuinfo_part": core.part}


def estimate(ones: list[int], manys: list[int], repeat: int) -> int:
    """Instructions per inference from the repetitions' counts of 1 and 1 + N inferences (the
    module doc: the minimum of each, as the noise only ever adds)."""
    return int(round((min(manys) - min(ones)) / repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODEL_ORDER), help="comma list: " + ", ".join(MODEL_ORDER))
    ap.add_argument("--cores", default=",".join(CORES), help="comma list: " + ", ".join(CORES))
    ap.add_argument("--repeat", type=int, default=3, help="N: count 1 and 1+N inferences")
    ap.add_argument("--reps", type=int, default=3, help="repetitions; the median is reported")
    ap.add_argument("--root", default=str(TARGET / "arm64-root"), help="the arm64 userland")
    ap.add_argument("--plugin", default=str(TARGET / "qemu-plugin" / "libqemu_insn_count.so"))
    ap.add_argument("--json", default=str(TARGET / "ort-aarch64.json"))
    ap.add_argument("--work", default=str(TARGET / "ort-aarch64" / "work"))
    ap.add_argument("--setup-only", action="store_true", help="set up the userland and models, count nothing")
    ap.add_argument("--list", action="store_true", help="print `NAME PATH` of the models found and exit")
    ap.add_argument("--arm-bench-args", action="store_true",
                    help="print `--model NAME=PATH ...` for bench/arm_bench.py and exit")
    args = ap.parse_args()
    want = [m for m in args.models.split(",") if m]
    for m in want:
        if m not in MODEL_ORDER:
            ap.error(f"unknown model {m}: {', '.join(MODEL_ORDER)}")
    if args.list or args.arm_bench_args:
        found = model_paths()
        if args.list:
            for m in want:
                print(m, found.get(m, "(missing)"))
        else:
            print(" ".join(f"--model {m}={found[m]}" for m in want if m in found))
        return 0
    cores = []
    for c in [c for c in args.cores.split(",") if c]:
        if c not in CORES:
            ap.error(f"unknown core {c}: {', '.join(CORES)}")
        cores.append(CORES[c])
    root = Path(args.root).resolve()
    setup_root(root)
    make_models(want)
    found = model_paths()
    for m in want:
        if m not in found:
            log(f"{m}: skipped (not found; see --list)")
    if args.setup_only:
        return 0
    if not Path(args.plugin).exists():
        sys.exit(f"no plugin at {args.plugin}: run scripts/build_qemu_plugin.sh")
    jpath = Path(args.json)
    data = json.loads(jpath.read_text()) if jpath.exists() else {}
    data.update({"tool": "bench/ort_aarch64.py", "onnxruntime": ORT_VERSION, "numpy": NUMPY_VERSION,
                 "unit": "instructions per inference under qemu-aarch64 (TCG plugin), not time"})
    models = data.setdefault("models", {})
    failures = 0
    for name in [m for m in want if m in found]:
        for core in cores:
            try:
                r = bench(root, args.plugin, name, found[name], core, args.repeat, args.reps, Path(args.work))
            except Exception as e:  # one failing pair does not stop the others
                failures += 1
                log(f"{name} {core.label}: FAILED: {e}")
                print(f"ort-aarch64 {name} {core.label} insns=FAILED", flush=True)
                continue
            entry = models.setdefault(name, {})
            entry["path"] = str(found[name])
            entry[core.label] = r
            jpath.parent.mkdir(parents=True, exist_ok=True)
            jpath.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            print(f"ort-aarch64 {name} {core.label} insns={r['insns']}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
