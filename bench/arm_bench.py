#!/usr/bin/env python3
"""Deterministic Arm instruction counts for models compiled by xla-aot (issue 42, item 1).

    bench/arm.sh                                   # everything: the example models on every core
    bench/arm.sh --models mlp,ds_cnn --cores m4,m55
    bench/arm.sh --model kws=/path/kws.onnx        # any model file xla-aot compiles (repeatable)
    bench/arm.sh --check                           # each count twice: must be identical
    .venv/bin/python bench/arm_bench.py ...        # the same without arm.sh's set-up

What it counts. Instructions executed by QEMU's TCG (scripts/qemu_insn_count.c, built by
scripts/build_qemu_plugin.sh), never time: a Cortex-M run under `qemu-system-arm -M <board>`, an
aarch64 run under `qemu-aarch64 -cpu <cpu>`. Each model/core pair is built twice, to run 1 and
1 + N inferences (N = --repeat, default 3), and

    ours = (count(1 + N) - count(1)) / N

so start-up, input set-up and output printing cancel. The per-kernel figures are the same
difference per symbol: the plugin writes every translation block's start address, length and
execution count, and each block is charged to the ELF symbol (`nm`) that contains its start.
Kernels are local functions `<name>_k<i>_<op>` of the library (their outlined `.task` bodies
counted with them); a kernel identical to an earlier one may run the earlier one's function, and
its line then lists every kernel it runs (`runs=`). What kernels call (memcpy, memset, libm) shows
under its own name.

Cores:
  * m4, m7, m33, m55: examples/mcu-app (its Makefile, REPEAT=1 and 1+N) on mps2-an386 (Cortex-M4F,
    target cortex-m4f), mps2-an500 (Cortex-M7, cortex-m7), mps2-an505 (Cortex-M33, cortex-m33) and
    mps3-an547 (Cortex-M55, cortex-m55).
    flash = the bytes the model's library takes in the linked image (its input sections in the
            linker map: code, constants, weights, initialised data);
    ram   = the library's .data + .bss, its arena (<NAME>_ARENA_SIZE) and the stack's high-water
            mark from reset through the last inference (start.c paints the stack; main.c prints
            `stack_high_water`), i.e. everything but the caller's input and output buffers.
    Also printed: the whole image's flash (text + data of `arm-none-eabi-size`, with newlib's
    printf and semihosting, which a product does not need).
  * aarch64-neon (qemu -cpu cortex-a72: no dotprod) and aarch64-a78 (qemu -cpu neoverse-n1, the
    qemu core closest to the A78: dotprod, fp16): bench/arm_driver.c linked statically with
    aarch64-linux-gnu-gcc, run by `qemu-aarch64` with RUNS = 1 and 1 + N.
    flash = the library's input sections in the linked executable (linker map), as for Cortex-M;
    ram   = the library's .data + .bss and its arena; the stack is not measured there.

Output: detail lines start with `#`; per kernel (the --top symbols by instructions per inference)
`kernel MODEL CORE INSNS SHARE SYMBOL [flops=F insns/flop=R]`; and per model and core one line a
script reads:

    arm-bench MODEL CORE ours=INSNS peer=INSNS ratio=R flash=BYTES peer_flash=BYTES ram=BYTES peer_ram=BYTES

where a peer figure not measured yet is `-` (PEERS below is where measured peer figures go; the
aarch64 rows also take onnxruntime's counts from target/ort-aarch64.json, written by
bench/ort_aarch64.py).
Counts are exact integers when the N inferences execute identically (they do for our libraries:
no allocator, no data-dependent control flow outside the kernels' own loops); otherwise the
quotient is printed with one decimal.

Models: --models picks from the built-in list (MODELS: the examples' YAML specs); --model
NAME=PATH adds any .yaml/.onnx/.hlo.txt/.tflite file (compiled with `xla-aot compile PATH`, plus
--compile-flag options). The harnesses feed f32 inputs, or int8 ones to a model whose inputs and
outputs are all int8 (a full-integer TFLite model: manifest dtype `i8`), built with -DIO_INT8; a
model with any other mix of types is skipped with a note. Nothing here is run by scripts/test.sh or
CI.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "mcu-app"

# Inferences added to the single one: the difference of the two counts is divided by it. Counts
# are exact, so a small N suffices; 3 also shows a first-call effect (it would make the quotient
# fractional).
DEFAULT_REPEAT = 3

# A board run that takes longer is stuck (a fault handler spins forever); simplenet's 1 + 3
# inferences take well under a minute with the plugin.
QEMU_TIMEOUT_S = 900


@dataclass(frozen=True)
class McuCore:
    """An emulated Cortex-M board: examples/mcu-app's BOARD and the xla-aot target it implies."""

    label: str
    board: str
    target: str


@dataclass(frozen=True)
class A64Core:
    """An aarch64 target run under qemu-aarch64 with -cpu `cpu`."""

    label: str
    target: str
    cpu: str


MCU_CORES = [
    McuCore("m4", "mps2-an386", "cortex-m4f"),
    McuCore("m7", "mps2-an500", "cortex-m7"),
    McuCore("m33", "mps2-an505", "cortex-m33"),
    McuCore("m55", "mps3-an547", "cortex-m55"),
]
A64_CORES = [
    # The Cortex-A72 has NEON but not the dot-product extension, like the aarch64-neon target.
    A64Core("aarch64-neon", "aarch64-neon", "cortex-a72"),
    # QEMU 7.2 has no cortex-a78; its neoverse-n1 is the same Armv8.2 generation (dotprod, fp16).
    A64Core("aarch64-a78", "aarch64-a78", "neoverse-n1"),
]
CORES = {c.label: c for c in MCU_CORES + A64_CORES}

# Built-in models: name -> spec. Extend here or with --model NAME=PATH (ONNX files included).
MODELS = {
    "mlp": ROOT / "examples" / "mlp" / "model.yaml",
    "ds_cnn": ROOT / "examples" / "ds_cnn" / "model.yaml",
    "simplenet": ROOT / "examples" / "simplenet" / "model.yaml",
}

# Peer figures per (model, core): {"insns": ..., "flash": ..., "ram": ...}, filled in when a peer
# (TFLite Micro + CMSIS-NN on the boards, onnxruntime on aarch64) has been counted the same way for
# the same model. A model is looked up by its --model NAME, then by its library's name (the model
# file's stem, e.g. kws_ref_model). TFLite Micro + CMSIS-NN on the MLPerf Tiny int8 models
# (../shared/ENV.md: release microlite, counted with the same plugin on mps2-an386, and with
# TARGET_ARCH=cortex-m55 on mps3-an547): instructions per inference and `arena_used_bytes` as
# "ram" (the arena alone: TFLite Micro's stack and static data were not measured, so peer_ram is a
# lower bound of what `ram` counts for us).
# "flash": bench/tflm_peer.sh (TFLM at tflite-micro 90b983c2, CMSIS-NN 4ab83cc3, release microlite,
# the image linked with --gc-sections): the bytes of loaded output sections (not .bss) that come
# from input sections of libtensorflow-microlite.a (TFLM's code and constant data, CMSIS-NN's
# kernels) plus the model array (the .tflite file as linked), read from the linker map, with the
# default registrations MicroMutableOpResolver::Add<Op>() of exactly the model's operators. Not
# counted: the harness, start.c, and newlib/libm/libgcc (memcpy, memset, frexp... that TFLM also
# calls; a few KiB). "flash_int8": the same with the int8-only registrations
# (Register_CONV_2D_INT8() etc., which drop CMSIS-NN's int16/int4 paths): the smaller figure.
PEERS: dict[tuple[str, str], dict[str, float]] = {
    ("kws_ref_model", "m4"): {"insns": 7.70e6, "ram": 22820, "flash": 130293, "flash_int8": 99665},
    ("vww_96_int8", "m4"): {"insns": 24.10e6, "ram": 100708, "flash": 411945, "flash_int8": 381317},
    ("pretrainedResnet_quant", "m4"): {"insns": 29.87e6, "ram": 54996, "flash": 171915,
                                       "flash_int8": 144231},
    ("ad01_int8", "m4"): {"insns": 0.58e6, "ram": 2580, "flash": 303551, "flash_int8": 299799},
    ("str_ww_ref_model", "m4"): {"insns": 2.23e6, "ram": 16596, "flash": 147795, "flash_int8": 117731},
    ("kws_ref_model", "m55"): {"insns": 1.81e6, "ram": 27348, "flash": 121033, "flash_int8": 93193},
    ("vww_96_int8", "m55"): {"insns": 6.56e6, "ram": 100772, "flash": 402813, "flash_int8": 374973},
    ("pretrainedResnet_quant", "m55"): {"insns": 4.91e6, "ram": 55028, "flash": 161891,
                                        "flash_int8": 136823},
    ("ad01_int8", "m55"): {"insns": 0.150e6, "ram": 9268, "flash": 298945, "flash_int8": 294625},
    ("str_ww_ref_model", "m55"): {"insns": 0.408e6, "ram": 19956, "flash": 137919,
                                  "flash_int8": 110655},
}

# onnxruntime on aarch64, counted the same way by bench/ort_aarch64.py (one thread, 1 and 1 + N
# inferences in one session, the median of its repetitions): {"models": {MODEL: {CORE: {"insns":
# ...}}}}, MODEL the model file's stem. Used for the aarch64 rows when PEERS has no figure.
ORT_AARCH64_JSON = ROOT / "target" / "ort-aarch64.json"


def ort_aarch64_peers(path: Path = ORT_AARCH64_JSON) -> dict[tuple[str, str], dict[str, float]]:
    if not path.exists():
        return {}
    try:
        models = json.loads(path.read_text()).get("models", {})
    except (OSError, ValueError) as e:
        log(f"{path}: unreadable ({e}); no onnxruntime peer figures")
        return {}
    return {(m, core): {"insns": r["insns"]} for m, cores in models.items()
            for core, r in cores.items() if core in {c.label for c in A64_CORES}
            and isinstance(r, dict) and "insns" in r}


def peer_of(name: str, lib_name: str, core: str, ort: dict) -> dict[str, float]:
    """The peer figures of a model/core row: PEERS, else (aarch64) bench/ort_aarch64.py's JSON;
    looked up by the --model NAME, then by the library's name."""
    for table in (PEERS, ort):
        for key in ((name, core), (lib_name, core)):
            if key in table:
                return table[key]
    return {}


def log(msg: str) -> None:
    print(f"# {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def find_compiler() -> str:
    env = os.environ.get("XLA_AOT")
    if env:
        return env
    for p in (ROOT / "target" / "release" / "xla-aot", ROOT / "target" / "debug" / "xla-aot"):
        if p.exists():
            return str(p)
    sys.exit("no xla-aot binary: build it (cargo build -p xla-aot --release) or set XLA_AOT")


@dataclass
class Compiled:
    name: str
    dir: Path
    manifest: dict
    header: dict[str, int]


def compile_model(xla: str, spec: Path, target: str, out: Path, flags: list[str], dump: Path | None) -> Compiled:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [xla, "compile", str(spec), "--target", target, "--out-dir", str(out), *flags]
    if dump:
        cmd += ["--dump-to", str(dump)]
    run(["nice", "-n", "10", *cmd])
    manifests = [p for p in out.glob("*.json")]
    if len(manifests) != 1:
        raise RuntimeError(f"expected one manifest in {out}, found {manifests}")
    manifest = json.loads(manifests[0].read_text())
    name = manifest["name"]
    header = {}
    for line in (out / f"{name}.h").read_text().splitlines():
        m = re.match(rf"#define {name.upper()}_(\w+) (\d+)\b", line)
        if m:
            header[m.group(1)] = int(m.group(2))
    return Compiled(name, out, manifest, header)


def elements(t: dict) -> int:
    n = 1
    for d in t["shape"]:
        n *= d
    return n


def sizes_flags(c: Compiled) -> str:
    """The harnesses' size macros; -DIO_INT8 for an all-int8 model (its elements still take one
    float slot each of the `io` buffer, so IO_FLOATS is the same sum)."""
    ins = [elements(t) for t in c.manifest["inputs"]]
    outs = [elements(t) for t in c.manifest["outputs"]]
    return (
        f"-DIN_SIZES={{{','.join(map(str, ins))}}} -DOUT_SIZES={{{','.join(map(str, outs))}}} "
        f"-DIO_FLOATS={sum(ins) + sum(outs)}" + (" -DIO_INT8" if io_type(c) == "i8" else "")
    )


def io_type(c: Compiled) -> str | None:
    """"f32" or "i8" when every input and output has that type (what the harnesses feed and
    print: examples/mcu-app/main.c and bench/arm_driver.c, the latter with -DIO_INT8), else None."""
    types = {t["dtype"] for t in c.manifest["inputs"] + c.manifest["outputs"]}
    return types.pop() if len(types) == 1 and types <= {"f32", "i8"} else None


def io_types(c: Compiled) -> str:
    return (f"inputs {[t['dtype'] for t in c.manifest['inputs']]}, "
            f"outputs {[t['dtype'] for t in c.manifest['outputs']]}")


# --- counting -------------------------------------------------------------------------------


def read_count(path: Path) -> int:
    m = re.match(r"insns (\d+)", path.read_text())
    if not m:
        raise RuntimeError(f"{path}: no instruction count")
    return int(m.group(1))


def read_tbs(path: Path) -> list[tuple[int, int, int]]:
    rows = []
    for line in path.read_text().splitlines():
        pc, n, execs = line.split()
        rows.append((int(pc, 16), int(n), int(execs)))
    return rows


class Symbols:
    """Function symbols of an ELF, for charging a block to the function holding its start."""

    def __init__(self, nm: str, elf: Path, thumb: bool):
        out = run([nm, "-n", "--defined-only", str(elf)]).stdout
        self.addrs: list[int] = []
        self.names: list[str] = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) != 3 or parts[1] not in "tTwW":
                continue
            a = int(parts[0], 16)
            if thumb:
                a &= ~1
            self.addrs.append(a)
            self.names.append(parts[2])

    def at(self, pc: int) -> str:
        i = bisect.bisect_right(self.addrs, pc) - 1
        return self.names[i] if i >= 0 else "?"


def per_symbol(rows, syms: Symbols) -> dict[str, int]:
    out: dict[str, int] = {}
    for pc, n, execs in rows:
        s = syms.at(pc)
        out[s] = out.get(s, 0) + n * execs
    return out


@dataclass
class Count:
    total: int
    symbols: dict[str, int]
    stdout: str


def quotient(a: int, b: int, n: int) -> float | int:
    d = a - b
    return d // n if d % n == 0 else d / n


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.1f}" if x != int(x) else str(int(x))
    return str(x)


# --- Cortex-M -------------------------------------------------------------------------------


def map_input_sections(mapfile: Path):
    """Every input section of a GNU ld map file, as (output section, input section, bytes,
    source): source is the map's text after the size (an object file, or `archive(member)`)."""
    text = mapfile.read_text()
    lines = text[text.find("Linker script and memory map"):].splitlines()
    current = None
    pending = None  # an input section name on a line of its own
    num = r"0x[0-9a-fA-F]+"
    for line in lines:
        m = re.match(rf"^(\.\S+)(\s+{num}\s+{num}.*|\s*)$", line)
        if m:
            current, pending = m.group(1), None
            continue
        m = re.match(rf"^ (\S+)\s+({num})\s+({num})\s+(\S.*)$", line)
        if m:
            sec, size, src = m.group(1), int(m.group(3), 16), m.group(4)
        else:
            m = re.match(rf"^\s+({num})\s+({num})\s+(\S.*)$", line)
            if m and pending:
                sec, size, src = pending, int(m.group(2), 16), m.group(3)
            else:
                m2 = re.match(r"^ (\.\S+)\s*$", line)
                pending = m2.group(1) if m2 else None
                continue
        pending = None
        if current:
            yield current, sec, size, src


def map_library_bytes(mapfile: Path, lib: str) -> dict[str, int]:
    """Bytes of input sections from `lib` (an archive's file name) per output section, read from
    a GNU ld map file."""
    out: dict[str, int] = {}
    for current, _, size, src in map_input_sections(mapfile):
        if f"/{lib}(" in src or src.startswith(f"{lib}("):
            out[current] = out.get(current, 0) + size
    return out


# Output sections that take no flash: .bss (zeroed RAM) and those never loaded (build attributes,
# notes, comments, debug information).
NOT_LOADED = re.compile(r"^\.(ARM\.attributes|note|comment|debug|stab|bss)")


def size_of(elf: Path) -> tuple[int, int, int]:
    out = run(["arm-none-eabi-size", str(elf)]).stdout.splitlines()[1].split()
    return int(out[0]), int(out[1]), int(out[2])


def build_mcu(xla: str, c: Compiled, spec: Path, core: McuCore, repeat: int) -> Path:
    r = 1 + repeat
    for reps in (1, r):
        run(
            [
                "nice", "-n", "10", "make", "-s", "-C", str(APP),
                f"MODEL={c.name}", f"SPEC={spec}", f"BOARD={core.board}", f"BUILD={c.dir}",
                f"XLA_AOT={xla}", f"SIZES={sizes_flags(c)}", f"REPEAT={reps}",
                str(c.dir / (f"{c.name}.elf" if reps == 1 else f"{c.name}-r{reps}.elf")),
            ]
        )
    return c.dir


def count_mcu(plugin: str, elf: Path, board: str, tag: str) -> Count:
    out = elf.parent / f"{elf.stem}.{tag}.insns"
    tbs = elf.parent / f"{elf.stem}.{tag}.tbs"
    stdout = elf.parent / f"{elf.stem}.{tag}.out"
    with open(stdout, "w") as f:
        # stdout into a file: QEMU makes its stdio non-blocking and a pipe can lose output
        # (xla-aot/tests/mcu.rs).
        r = subprocess.run(
            ["timeout", str(QEMU_TIMEOUT_S), "nice", "-n", "10", "qemu-system-arm", "-M", board,
             "-nographic", "-semihosting", "-kernel", str(elf),
             "-plugin", f"{plugin},out={out},tbs={tbs}"],
            stdout=f, stderr=subprocess.PIPE, text=True,
        )
    text = stdout.read_text()
    if r.returncode != 0 or "status 0" not in text:
        raise RuntimeError(f"{elf} on {board}: exit {r.returncode}\n{text[-1500:]}\n{r.stderr[-1500:]}")
    syms = Symbols("arm-none-eabi-nm", elf, thumb=True)
    return Count(read_count(out), per_symbol(read_tbs(tbs), syms), text)


def bench_mcu(xla, plugin, name, spec, core: McuCore, args, work: Path):
    c = compile_model(xla, spec, core.target, work / f"{name}-{core.label}", args.compile_flag, None)
    if io_type(c) is None:
        log(f"{name} {core.label}: skipped (examples/mcu-app feeds all-f32 or all-int8 inputs and "
            f"outputs; this model has {io_types(c)})")
        return None
    build_mcu(xla, c, spec, core, args.repeat)
    r = 1 + args.repeat
    one = c.dir / f"{c.name}.elf"
    many = c.dir / f"{c.name}-r{r}.elf"
    runs = 2 if args.check else 1
    results = []
    for k in range(runs):
        a = count_mcu(plugin, one, core.board, f"run{k}")
        b = count_mcu(plugin, many, core.board, f"run{k}")
        results.append((a, b))
    a, b = results[0]
    if args.check:
        check_deterministic(name, core.label, results, r)
    ours = quotient(b.total, a.total, args.repeat)
    stack = int(re.search(r"stack_high_water (-?\d+)", b.stdout).group(1))
    lib = map_library_bytes(many.with_suffix(".elf.map"), f"lib{c.name}.a")
    lib_flash = sum(v for k, v in lib.items() if k != ".bss" and not NOT_LOADED.match(k))
    lib_static_ram = lib.get(".data", 0) + lib.get(".bss", 0)
    arena = c.header["ARENA_SIZE"]
    ram = lib_static_ram + arena + stack if stack >= 0 else None
    text, data, bss = size_of(many)
    log(f"{name} {core.label} ({core.board}, {core.target}): count(1)={a.total} "
        f"count({r})={b.total}; library in the image {lib}; header FLASH_BYTES="
        f"{c.header.get('FLASH_BYTES')} RAM_BYTES={c.header.get('RAM_BYTES')}; arena={arena} "
        f"stack_high_water={stack}; whole image flash={text + data} (text {text} + data {data}), "
        f"bss={bss}")
    owners = kernel_functions("arm-none-eabi-objdump", many, c)
    kernels = kernel_lines(name, core.label, a.symbols, b.symbols, args.repeat, c, args.top, owners)
    return ours, lib_flash, ram, kernels, c.name


def check_deterministic(name, label, results, r):
    """`--check`: every run's counts of 1 and `r` inferences, in total and per symbol, equal the
    first run's; raises otherwise."""
    a, b = results[0]
    same = all(x.total == a.total and y.total == b.total and x.symbols == a.symbols
               and y.symbols == b.symbols for x, y in results)
    log(f"{name} {label}: determinism check ({len(results)} runs each of 1 and {r} inferences): "
        f"{'identical' if same else 'DIFFERENT ' + str([(x.total, y.total) for x, y in results])}")
    if not same:
        raise RuntimeError(f"{name} on {label}: counts differ between runs")


# --- aarch64 --------------------------------------------------------------------------------


def bench_a64(xla, plugin, name, spec, core: A64Core, args, work: Path):
    c = compile_model(xla, spec, core.target, work / f"{name}-{core.label}", args.compile_flag, None)
    if io_type(c) is None:
        log(f"{name} {core.label}: skipped (bench/arm_driver.c feeds all-f32 or all-int8 inputs "
            f"and outputs; this model has {io_types(c)})")
        return None
    exe = c.dir / f"{c.name}-driver"
    upper = c.name.upper()
    run(
        ["nice", "-n", "10", "aarch64-linux-gnu-gcc", "-O2", "-std=c11", "-Wall", "-static", "-no-pie",
         "-include", str(c.dir / f"{c.name}.h"), f"-DMODEL={c.name}",
         f"-DARENA_SIZE={upper}_ARENA_SIZE", f"-DARENA_ALIGN={upper}_ARENA_ALIGN",
         *sizes_flags(c).split(), str(ROOT / "bench" / "arm_driver.c"),
         str(c.dir / f"lib{c.name}.a"), "-lm", f"-Wl,-Map={exe}.map", "-o", str(exe)]
    )
    lib = map_library_bytes(Path(f"{exe}.map"), f"lib{c.name}.a")
    flash = sum(v for k, v in lib.items() if not NOT_LOADED.match(k))
    ram = lib.get(".data", 0) + lib.get(".bss", 0) + c.header["ARENA_SIZE"]
    syms = Symbols("aarch64-linux-gnu-nm", exe, thumb=False)
    r = 1 + args.repeat

    def count(reps: int, tag: str) -> Count:
        out = c.dir / f"r{reps}.{tag}.insns"
        tbs = c.dir / f"r{reps}.{tag}.tbs"
        # A fixed, empty environment: the program's start-up reads it.
        p = run(["timeout", str(QEMU_TIMEOUT_S), "nice", "-n", "10", "qemu-aarch64", "-cpu", core.cpu,
                 "-plugin", f"{plugin},out={out},tbs={tbs}", str(exe), str(reps)], env={})
        if "status 0" not in p.stdout:
            raise RuntimeError(f"{exe}: {p.stdout}")
        return Count(read_count(out), per_symbol(read_tbs(tbs), syms), p.stdout)

    runs = 2 if args.check else 1
    results = [(count(1, f"run{k}"), count(r, f"run{k}")) for k in range(runs)]
    a, b = results[0]
    if args.check:
        check_deterministic(name, core.label, results, r)
    if a.stdout.split()[1] != b.stdout.split()[1]:
        raise RuntimeError(f"{name} on {core.label}: outputs differ between 1 and {r} runs")
    ours = quotient(b.total, a.total, args.repeat)
    log(f"{name} {core.label} (qemu-aarch64 -cpu {core.cpu}, {core.target}): count(1)={a.total} "
        f"count({r})={b.total}; library in the image {lib}; arena {c.header['ARENA_SIZE']}")
    owners = kernel_functions("aarch64-linux-gnu-objdump", exe, c)
    kernels = kernel_lines(name, core.label, a.symbols, b.symbols, args.repeat, c, args.top, owners)
    return ours, flash, ram, kernels, c.name


def fold_parts(counts: dict[str, int], kernels: dict) -> dict[str, int]:
    """Charges a kernel's outlined parts (`<kernel>.task`, the body its parallel-for hook runs) to
    the kernel itself."""
    out: dict[str, int] = {}
    for s, v in counts.items():
        base = s.split(".", 1)[0]
        key = base if base in kernels else s
        out[key] = out.get(key, 0) + v
    return out


def kernel_functions(objdump: str, elf: Path, c: Compiled) -> dict[str, list[str]]:
    """Function -> the manifest kernels it runs. A kernel identical to an earlier one has no
    function of its own: `<name>_impl` calls the earlier kernel's (ds_cnn's pointwise layers 2 and
    3 run layer 1's code on Cortex-M). The first calls of `<name>_impl` are the kernels in order;
    the mapping is used only if every kernel with a function of its own is called in its place."""
    kernels = [k["name"] for k in c.manifest.get("kernels", [])]
    identity = {k: [k] for k in kernels}
    out = run([objdump, "-d", "--no-show-raw-insn", str(elf)]).stdout
    m = re.search(rf"<{re.escape(c.name)}_impl>:\n(.*?)\n\n", out, re.S)
    if not m:
        return identity
    known = set(kernels)
    calls = []
    for t in re.findall(r"\bbl\s+\S+\s+<([^>+]+)>", m.group(1)):
        base = t.split(".", 1)[0]
        if base.startswith(f"{c.name}_k"):
            calls.append(base)
    if len(calls) < len(kernels):
        return identity
    calls = calls[: len(kernels)]
    present = set(calls)
    if any(k in present and calls[i] != k for i, k in enumerate(kernels)) or not present <= known:
        return identity
    owners: dict[str, list[str]] = {}
    for k, f in zip(kernels, calls):
        owners.setdefault(f, []).append(k)
    return owners


def kernel_lines(model, core, one: dict, many: dict, n: int, c: Compiled, top: int,
                 owners: dict[str, list[str]]) -> list[str]:
    """`kernel MODEL CORE INSNS SHARE SYMBOL [flops=F insns/flop=R] [runs=K1,K2,...]`: the `top`
    symbols by instructions per inference, with the manifest's flops of the kernels the symbol
    runs (several when identical kernels share one function)."""
    kflops = {k["name"]: k.get("flops", 0) for k in c.manifest.get("kernels", [])}
    flops = {f: sum(kflops.get(k, 0) for k in ks) for f, ks in owners.items()}
    one, many = fold_parts(one, kflops), fold_parts(many, kflops)
    diffs = {s: quotient(many.get(s, 0), one.get(s, 0), n) for s in set(one) | set(many)}
    diffs = {s: v for s, v in diffs.items() if v}
    total = sum(diffs.values()) or 1
    lines = []
    for s, v in sorted(diffs.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        extra = f" flops={flops[s]} insns/flop={v / flops[s]:.3f}" if flops.get(s) else ""
        if len(owners.get(s, [])) > 1:
            extra += " runs=" + ",".join(owners[s])
        lines.append(f"kernel {model} {core} {fmt(v)} {100.0 * v / total:.1f}% {s}{extra}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="built-in models to run (comma list)")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                    help="another model file (.yaml, .onnx, .hlo.txt, .tflite); repeatable")
    ap.add_argument("--cores", default=",".join(CORES), help="cores (comma list): " + ", ".join(CORES))
    ap.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="N: count 1 and 1+N inferences")
    ap.add_argument("--check", action="store_true", help="count everything twice; fail unless identical")
    ap.add_argument("--top", type=int, default=8, help="kernel lines per model and core")
    ap.add_argument("--compile-flag", action="append", default=[], help="extra `xla-aot compile` option")
    ap.add_argument("--work", default=str(ROOT / "target" / "arm-bench"), help="build directory")
    ap.add_argument("--plugin", default=str(ROOT / "target" / "qemu-plugin" / "libqemu_insn_count.so"))
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if not Path(args.plugin).exists():
        sys.exit(f"no plugin at {args.plugin}: run scripts/build_qemu_plugin.sh")
    models = {}
    for m in [m for m in args.models.split(",") if m]:
        if m not in MODELS:
            ap.error(f"unknown model {m}: {', '.join(MODELS)} or --model NAME=PATH")
        models[m] = MODELS[m]
    for m in args.model:
        name, _, path = m.partition("=")
        if not path:
            ap.error(f"--model {m}: expected NAME=PATH")
        models[name] = Path(path).resolve()
    cores = []
    for c in [c for c in args.cores.split(",") if c]:
        if c not in CORES:
            ap.error(f"unknown core {c}: {', '.join(CORES)}")
        cores.append(CORES[c])
    xla = find_compiler()
    log(f"compiler {xla}; plugin {args.plugin}; N = {args.repeat}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    failures = 0
    ort = ort_aarch64_peers()
    for name, spec in models.items():
        for core in cores:
            try:
                if isinstance(core, McuCore):
                    r = bench_mcu(xla, args.plugin, name, spec, core, args, work)
                else:
                    r = bench_a64(xla, args.plugin, name, spec, core, args, work)
            except Exception as e:  # one failing pair does not stop the others
                failures += 1
                log(f"{name} {core.label}: FAILED: {e}")
                print(f"arm-bench {name} {core.label} ours=FAILED peer=- ratio=- flash=- peer_flash=- ram=- peer_ram=-", flush=True)
                continue
            if r is None:
                continue
            ours, flash, ram, kernels, lib_name = r
            for k in kernels:
                print(k)
            peer = peer_of(name, lib_name, core.label, ort)
            pi = peer.get("insns")
            ratio = f"{ours / pi:.3f}" if pi else "-"
            print(
                f"arm-bench {name} {core.label} ours={fmt(ours)} peer={fmt(pi)} ratio={ratio} "
                f"flash={fmt(flash)} peer_flash={fmt(peer.get('flash'))} ram={fmt(ram)} "
                f"peer_ram={fmt(peer.get('ram'))}",
                flush=True,
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
