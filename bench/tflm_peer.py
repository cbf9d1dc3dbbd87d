"""Helpers of bench/tflm_peer.sh (TFLite Micro + CMSIS-NN, the Cortex-M peer of the Arm bench).

  tflm_peer.py ops MODEL.tflite SCHEMA_GENERATED_H   # `#define TFLM_OPS(X) X(Conv2D, ) ...`
  tflm_peer.py model MODEL.tflite                     # the model as the C++ array g_model
  tflm_peer.py flash MAP                              # flash bytes per part of a linked image
  tflm_peer.py kernels ELF1 TBS1 ELFN TBSN N          # instructions per inference per function

Flash (from a GNU ld map, with bench/arm_bench.py's reader): bytes of input sections that land in
loaded output sections (everything but .bss and never-loaded sections: attributes, comments,
debug), grouped by where they come from. Printed as `LIB MODEL TOTAL` then `source:bytes` pairs,
LIB the input sections of libtensorflow-microlite.a, MODEL those of libtflm_model.a (g_model and
g_model_len), TOTAL every input section of the image (the harness, start.c, newlib, libgcc...).
"""
from __future__ import annotations

import re
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arm_bench import NOT_LOADED, Symbols, map_input_sections, per_symbol, read_tbs  # noqa: E402


# Operators with an int8-only registration, Register_<NAME>_INT8 (CMSIS-NN's kernels for int8
# only, without the int16/int4 paths the default registrations also link).
INT8_REGISTRATIONS = {"ADD", "AVERAGE_POOL_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED",
                      "SOFTMAX"}


def ops(tflite: str, schema: str) -> None:
    """The model's builtin operators (Model.operator_codes) as X(Name, REGISTRATION), Name as in
    MicroMutableOpResolver's Add<Name>: TFLM_OPS with the default registrations (empty),
    TFLM_OPS_INT8 with the int8-only ones where TFLite Micro has them."""
    b = Path(tflite).read_bytes()
    u32 = lambda o: struct.unpack_from("<I", b, o)[0]  # noqa: E731

    def field(t, idx):
        vt = t - struct.unpack_from("<i", b, t)[0]
        if 4 + 2 * idx >= struct.unpack_from("<H", b, vt)[0]:
            return None
        off = struct.unpack_from("<H", b, vt + 4 + 2 * idx)[0]
        return t + off if off else None

    enum = re.search(r"enum BuiltinOperator : int32_t \{(.*?)\};", Path(schema).read_text(), re.S)
    names = {int(v): n for n, v in re.findall(r"BuiltinOperator_(\w+) = (-?\d+)", enum.group(1))}
    f = field(u32(0), 1)
    vec = f + u32(f)
    out: list[str] = []
    regs: list[str] = []
    for k in range(u32(vec)):
        e = vec + 4 + 4 * k
        t = e + u32(e)
        if field(t, 1):
            sys.exit(f"{tflite}: custom operator")
        d, c = field(t, 0), field(t, 3)
        code = max(struct.unpack_from("<b", b, d)[0] if d else 0,
                   struct.unpack_from("<i", b, c)[0] if c else 0)
        camel = "".join(p if re.fullmatch(r"\d+D", p) else p.capitalize()
                        for p in names[code].split("_"))
        if camel not in out:
            out.append(camel)
            regs.append(names[code])
    print("#define TFLM_OPS(X) " + " ".join(f"X({o}, )" for o in out))
    print("#define TFLM_OPS_INT8(X) " + " ".join(
        f"X({o}, tflite::Register_{r}_INT8())" if r in INT8_REGISTRATIONS else f"X({o}, )"
        for o, r in zip(out, regs)))


def model(tflite: str) -> None:
    """g_model (16-byte aligned, as TFLite Micro wants) in .rodata.xla_aot.tflm_model: the boards'
    linker scripts put that section where they put our models' weights (flash on mps2-an386, the
    QSPI flash window on mps3-an547)."""
    b = Path(tflite).read_bytes()
    print('__attribute__((section(".rodata.xla_aot.tflm_model"), aligned(16), used))')
    print("extern const unsigned char g_model[] = {")
    for i in range(0, len(b), 24):
        print("".join(f"{x}," for x in b[i:i + 24]))
    print("};")
    print(f"extern const unsigned int g_model_len = {len(b)};")


def map_sources(mapfile: Path) -> dict[str, dict[str, int]]:
    """{source: {output section: bytes}} over every input section of a GNU ld map; source is an
    archive's file name or an object file's name."""
    out: dict[str, dict[str, int]] = {}
    for current, sec, size, src in map_input_sections(mapfile):
        if sec.startswith("*") or size == 0:
            continue
        src = src.strip()
        name = Path(re.sub(r"\(.*\)$", "", src)).name
        d = out.setdefault(name, {})
        d[current] = d.get(current, 0) + size
    return out


def flash(mapfile: str) -> None:
    srcs = map_sources(Path(mapfile))
    loaded = {s: sum(v for k, v in d.items() if not NOT_LOADED.match(k)) for s, d in srcs.items()}
    loaded = {s: v for s, v in loaded.items() if v}
    lib = loaded.get("libtensorflow-microlite.a", 0)
    mdl = loaded.get("libtflm_model.a", 0)
    print(lib, mdl, sum(loaded.values()),
          " ".join(f"{s}:{v}" for s, v in sorted(loaded.items(), key=lambda x: -x[1])))


def kernels(elf1: str, tbs1: str, elfn: str, tbsn: str, n: str) -> None:
    """Instructions per inference per function ((1 + N) run minus 1 run, over N), the top ones,
    and the share spent in CMSIS-NN's functions (arm_*)."""
    a = per_symbol(read_tbs(Path(tbs1)), Symbols("arm-none-eabi-nm", Path(elf1), thumb=True))
    b = per_symbol(read_tbs(Path(tbsn)), Symbols("arm-none-eabi-nm", Path(elfn), thumb=True))
    reps = int(n)
    d = {s: (b.get(s, 0) - a.get(s, 0)) / reps for s in set(a) | set(b)}
    total = sum(d.values())
    cmsis = sum(v for s, v in d.items() if s.startswith("arm_"))
    top = sorted(d.items(), key=lambda x: -x[1])[:8]
    print(f"cmsis_nn_share={cmsis / total:.3f} top=" + ",".join(f"{s}:{v:.0f}" for s, v in top))


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    {"ops": ops, "model": model, "flash": flash, "kernels": kernels}[cmd](*rest)
