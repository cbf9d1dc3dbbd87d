#!/usr/bin/env bash
# The Cortex-M peer of the Arm bench (issue 42): TFLite Micro with CMSIS-NN kernels, built for the
# same emulated boards as our models (bench/arm_bench.py) and counted the same way.
#
#   TFLM_SRC=~/src/tflite-micro TFLM_DOWNLOADS=~/src/tflm-downloads bench/tflm_peer.sh
#   bench/tflm_peer.sh --cores m4 --models kws_ref_model --repeat 3
#
# What it does, per core (m4: TARGET_ARCH=cortex-m4+fp on mps2-an386; m55: TARGET_ARCH=cortex-m55
# on mps3-an547):
#   1. builds TFLM's release library, `make -f tensorflow/lite/micro/tools/make/Makefile
#      TARGET=cortex_m_generic TARGET_ARCH=... OPTIMIZED_KERNEL_DIR=cmsis_nn
#      TARGET_TOOLCHAIN_ROOT=/usr/bin/ BUILD_TYPE=release microlite` (hard-float, Debian's
#      arm-none-eabi-gcc; about 9 minutes per core on 2 cores; incremental afterwards);
#   2. per MLPerf Tiny int8 model ($MLPERF_TINY_DIR/<model>/model.tflite), links
#      bench/tflm_harness.cc (the model embedded as a const array; the model's operators, and only
#      those, registered through MicroMutableOpResolver; a 256 KiB arena) with
#      examples/mcu-app/start.c and the board's linker script (examples/mcu-app/<board>.ld; the
#      model array goes where our weights go), for 1 and 1 + N inferences;
#   3. runs both under qemu-system-arm with the instruction-counting plugin
#      (target/qemu-plugin/libqemu_insn_count.so, built by scripts/build_qemu_plugin.sh) and prints
#
#        tflm-peer MODEL CORE insns=I arena=A flash=F flash_lib=L flash_model=M flash_total=T
#                  flash_int8=F8 stack=S out=CHECKSUM
#
#      insns: (count(1 + N) - count(1)) / N, the whole program's instructions (as bench/arm_bench.py
#        counts ours; one decimal when not an integer: TFLM's first inference differs a little);
#      arena: the interpreter's arena_used_bytes();
#      flash = L + M: L = bytes of input sections from libtensorflow-microlite.a (TFLM's code,
#        CMSIS-NN's kernels and TFLM's constant data) and M = the model array (g_model and
#        g_model_len), in loaded output sections (everything but .bss and the never-loaded
#        attribute/comment/debug sections; .data's initial values count), read from the linker map
#        of the 1-inference image. Not counted in F: the harness (tflm_harness.cc, start.c and its
#        vector table) and newlib/libm/libgcc/librdimon, including the libc/libm/libgcc functions
#        TFLM itself calls (memcpy, memset, frexp...); T is every loaded byte of the image, and the
#        log (stderr) gives the bytes per source;
#      flash_int8: F again with the int8-only registrations (Register_CONV_2D_INT8() etc.) instead
#        of the default ones, whose kernels also link CMSIS-NN's int16 and int4 paths;
#      stack: the stack high-water mark (start.c's paint); out: FNV-1a of the first output's bytes
#        (the same on every core when the kernels agree).
#   It fails a model when no CMSIS-NN kernel (arm_convolve_* / arm_nn_mat_mult* /
#   arm_fully_connected_* ...) is in the ELF, and logs the share of each inference's instructions
#   spent in CMSIS-NN's functions (arm_*, from the plugin's per-block counts), the top functions and
#   the first output values.
#
# Checkouts it expects (nothing is downloaded; TFLM's download scripts skip folders that exist):
#   TFLM_SRC          tensorflow/tflite-micro (required)
#   TFLM_DOWNLOADS    TFLM's third-party folder (default: $TFLM_WORK/downloads), holding
#                       cmsis (CMSIS_6, with Cortex_DFP inside as cmsis/Cortex_DFP), cmsis_nn,
#                       flatbuffers (patched with TFLM's flatbuffers.patch), gemmlowp, ruy,
#                       kissfft (patched with TFLM's third_party/kissfft/kissfft.patch), pigweed
#                       (may be empty), at the commits TFLM's download scripts name
#                       (tensorflow/lite/micro/tools/make/ext_libs/cmsis*_download.sh,
#                       flatbuffers_download.sh, kissfft_download.sh, third_party_downloads.inc).
#   TFLM's Makefile fetches gemmlowp, ruy, flatbuffers and kissfft into the in-tree folder
#   $TFLM_SRC/tensorflow/lite/micro/tools/make/downloads whatever DOWNLOADS_DIR says, so that folder
#   is made a symbolic link to TFLM_DOWNLOADS (when it does not exist already).
#   A missing entry is filled from a checkout named by CMSIS_6_SRC, CORTEX_DFP_SRC, CMSIS_NN_SRC,
#   FLATBUFFERS_SRC, GEMMLOWP_SRC, RUY_SRC, KISSFFT_SRC (copied, then patched as TFLM's scripts do).
# Other settings: TFLM_WORK (build folder, default target/tflm-peer), MLPERF_TINY_DIR (default
# target/mlperf-tiny), QEMU_PLUGIN, TFLM_PYTHON (a python with numpy and pillow for TFLM's generator
# scripts; default: python3).
# Needs arm-none-eabi-gcc with newlib, qemu-system-arm, make, git. Not part of scripts/test.sh or CI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

CORES="m4,m55"
MODELS="kws_ref_model,vww_96_int8,pretrainedResnet_quant,ad01_int8,str_ww_ref_model"
REPEAT=3
while [ $# -gt 0 ]; do
    case "$1" in
        --cores) CORES="$2"; shift 2 ;;
        --models) MODELS="$2"; shift 2 ;;
        --repeat) REPEAT="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
        *) echo "tflm_peer.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

: "${TFLM_SRC:?set TFLM_SRC to a tensorflow/tflite-micro checkout}"
TFLM_SRC="$(realpath "$TFLM_SRC")"
TFLM_WORK="$(realpath -m "${TFLM_WORK:-$ROOT/target/tflm-peer}")"
TFLM_DOWNLOADS="$(realpath -m "${TFLM_DOWNLOADS:-$TFLM_WORK/downloads}")"
MLPERF_TINY_DIR="$(realpath -m "${MLPERF_TINY_DIR:-$ROOT/target/mlperf-tiny}")"
QEMU_PLUGIN="$(realpath -m "${QEMU_PLUGIN:-$ROOT/target/qemu-plugin/libqemu_insn_count.so}")"
mkdir -p "$TFLM_WORK" "$TFLM_DOWNLOADS"
[ -f "$QEMU_PLUGIN" ] || QEMU_PLUGIN="$(scripts/build_qemu_plugin.sh | tail -n1)"
for t in arm-none-eabi-gcc arm-none-eabi-g++ qemu-system-arm make git; do
    command -v "$t" >/dev/null || { echo "tflm_peer.sh: $t not found" >&2; exit 1; }
done
log() { echo "# tflm_peer: $*" >&2; }

# --- TFLM's downloads folder, filled from local checkouts -------------------------------------
# Copies checkout $2 to downloads/$1 (without .git and Bazel BUILD files) and, given $3, applies
# that patch the way TFLM's bash_helpers.sh does (git apply, ignoring whitespace).
fill() {
    local name="$1" src="$2" patch="${3:-}" dst="$TFLM_DOWNLOADS/$1"
    [ -d "$dst" ] && return 0
    [ -n "$src" ] || { echo "tflm_peer.sh: $dst missing and no checkout given for it" >&2; exit 1; }
    log "filling $dst from $src"
    mkdir -p "$dst.tmp"
    (cd "$src" && tar --exclude=.git -cf - .) | tar -xf - -C "$dst.tmp"
    if [ -n "$patch" ]; then
        find "$dst.tmp" \( -name BUILD -o -name BUILD.bazel \) -delete
        (cd "$dst.tmp" && git init -q . && git add -A . && git -c user.email=tflm@local -c user.name=tflm commit -qm base \
            && git apply --ignore-space-change --ignore-whitespace "$patch" && rm -rf .git)
    fi
    mv "$dst.tmp" "$dst"
}
fill cmsis "${CMSIS_6_SRC:-}"
if [ ! -d "$TFLM_DOWNLOADS/cmsis/Cortex_DFP" ]; then
    [ -n "${CORTEX_DFP_SRC:-}" ] || { echo "tflm_peer.sh: cmsis/Cortex_DFP missing; set CORTEX_DFP_SRC" >&2; exit 1; }
    mkdir -p "$TFLM_DOWNLOADS/cmsis/Cortex_DFP"
    (cd "$CORTEX_DFP_SRC" && tar --exclude=.git -cf - .) | tar -xf - -C "$TFLM_DOWNLOADS/cmsis/Cortex_DFP"
fi
fill cmsis_nn "${CMSIS_NN_SRC:-}"
fill flatbuffers "${FLATBUFFERS_SRC:-}" "$TFLM_SRC/tensorflow/lite/micro/tools/make/flatbuffers.patch"
fill gemmlowp "${GEMMLOWP_SRC:-}"
fill ruy "${RUY_SRC:-}"
fill kissfft "${KISSFFT_SRC:-}" "$TFLM_SRC/third_party/kissfft/kissfft.patch"
mkdir -p "$TFLM_DOWNLOADS/pigweed"
# TFLM's download rules for gemmlowp, ruy, flatbuffers and kissfft name the in-tree folder
# tensorflow/lite/micro/tools/make/downloads whatever DOWNLOADS_DIR says: link it to ours.
intree="$TFLM_SRC/tensorflow/lite/micro/tools/make/downloads"
if [ "$(realpath -m "$intree")" != "$TFLM_DOWNLOADS" ]; then
    if [ -L "$intree" ] || [ ! -e "$intree" ]; then
        ln -sfn "$TFLM_DOWNLOADS" "$intree"
    else
        echo "tflm_peer.sh: $intree exists and is not TFLM_DOWNLOADS; remove it or set TFLM_DOWNLOADS=$intree" >&2
        exit 1
    fi
fi

# TFLM's generator scripts run `python3`; it needs numpy and pillow.
if [ -n "${TFLM_PYTHON:-}" ]; then
    pybin="$(dirname "$(realpath -s "$TFLM_PYTHON")")"
    export PATH="$pybin:$PATH"
fi

# --- per core ---------------------------------------------------------------------------------
core_arch() { case "$1" in m4) echo cortex-m4+fp ;; m55) echo cortex-m55 ;; *) return 1 ;; esac; }
core_board() { case "$1" in m4) echo mps2-an386 ;; m55) echo mps3-an547 ;; esac; }
core_cpu() { case "$1" in m4) echo "-mcpu=cortex-m4 -mfpu=fpv4-sp-d16" ;; m55) echo "-mcpu=cortex-m55" ;; esac; }

build_lib() {  # $1 core; prints the library's path
    local arch gendir
    arch="$(core_arch "$1")"
    gendir="$TFLM_WORK/gen-$1"
    if [ "${TFLM_SKIP_BUILD:-0}" = 1 ]; then  # use the library already in $TFLM_WORK/gen-<core>
        find "$gendir" -name libtensorflow-microlite.a | grep . | head -n1
        return
    fi
    log "building libtensorflow-microlite.a for $arch (log: $TFLM_WORK/make-$1.log)"
    (cd "$TFLM_SRC" && make -f tensorflow/lite/micro/tools/make/Makefile -j"$(nproc)" \
        TARGET=cortex_m_generic TARGET_ARCH="$arch" OPTIMIZED_KERNEL_DIR=cmsis_nn \
        TARGET_TOOLCHAIN_ROOT=/usr/bin/ BUILD_TYPE=release \
        DOWNLOADS_DIR="$TFLM_DOWNLOADS" GENDIR="$gendir/" microlite) >"$TFLM_WORK/make-$1.log" 2>&1 \
        || { tail -n 30 "$TFLM_WORK/make-$1.log" >&2; return 1; }
    find "$gendir" -name libtensorflow-microlite.a | head -n1
}

peer_py() { python3 bench/tflm_peer.py "$@"; }

status=0
IFS=, read -r -a cores <<<"$CORES"
IFS=, read -r -a models <<<"$MODELS"
for core in "${cores[@]}"; do
    core_arch "$core" >/dev/null || { echo "tflm_peer.sh: unknown core $core (m4, m55)" >&2; exit 2; }
    lib="$(build_lib "$core")" || { status=1; continue; }
    gendir="$TFLM_WORK/gen-$core"
    board="$(core_board "$core")"
    # The flags an application of the release library needs (hard-float ABI; CMSIS_NN, which
    # TFLM's Makefile defines for OPTIMIZED_KERNEL_DIR=cmsis_nn, declares the kernels' int8-only
    # registrations); linked with --gc-sections, as TFLM's own Makefile links its binaries.
    cpu="$(core_cpu "$core") -mthumb -mfloat-abi=hard"
    inc=(-I"$TFLM_SRC" -I"$TFLM_DOWNLOADS/flatbuffers/include" -I"$TFLM_DOWNLOADS/gemmlowp"
         -I"$TFLM_DOWNLOADS/ruy" -I"$TFLM_DOWNLOADS")
    cxxflags=($cpu -O2 -std=c++17 -fno-rtti -fno-exceptions -fno-threadsafe-statics
              -fno-use-cxa-atexit -ffunction-sections -fdata-sections -DNDEBUG -DCMSIS_NN
              -DTF_LITE_STRIP_ERROR_STRINGS -DTF_LITE_STATIC_MEMORY -Wall)
    ldflags=($cpu --specs=rdimon.specs -nostartfiles -Wl,--gc-sections
             -T "examples/mcu-app/$board.ld")
    for model in "${models[@]}"; do
        tfl="$MLPERF_TINY_DIR/$model/model.tflite"
        out="$TFLM_WORK/$core/$model"
        mkdir -p "$out"
        if [ ! -f "$tfl" ]; then
            echo "# tflm_peer: $tfl missing (scripts/tflite_models.py / bench/mlperf_tiny.py fetch it)" >&2
            status=1; continue
        fi
        peer_py ops "$tfl" "$TFLM_SRC/tensorflow/lite/schema/schema_generated.h" >"$out/ops.h"
        peer_py model "$tfl" >"$out/model_data.cc"
        arm-none-eabi-g++ "${cxxflags[@]}" -c "$out/model_data.cc" -o "$out/model_data.o"
        rm -f "$out/libtflm_model.a" && arm-none-eabi-ar rcs "$out/libtflm_model.a" "$out/model_data.o"
        arm-none-eabi-gcc $cpu -O2 -std=c11 -c examples/mcu-app/start.c -o "$out/start.o"
        ok=1
        for reps in 1 $((1 + REPEAT)); do
            elf="$out/$model-r$reps.elf"
            arm-none-eabi-g++ "${cxxflags[@]}" "${inc[@]}" -include "$out/ops.h" -DREPEAT=$reps \
                -c bench/tflm_harness.cc -o "$out/harness-r$reps.o"
            arm-none-eabi-g++ "${ldflags[@]}" "$out/start.o" "$out/harness-r$reps.o" \
                "$out/libtflm_model.a" "$lib" -lm -Wl,-Map="$elf.map" -o "$elf" \
                || { ok=0; break; }
            timeout 900 nice -n 10 qemu-system-arm -M "$board" -nographic -semihosting -kernel "$elf" \
                -plugin "$QEMU_PLUGIN,out=$elf.insns,tbs=$elf.tbs" >"$elf.out" 2>"$elf.err" </dev/null || true
            grep -q "^status 0" "$elf.out" || { echo "# tflm_peer: $model $core r$reps failed:" >&2; tail -5 "$elf.out" "$elf.err" >&2; ok=0; break; }
        done
        [ $ok = 1 ] || { status=1; continue; }
        # The same with the int8-only registrations (flash only; one inference, output checked).
        i8="$out/$model-int8.elf"
        arm-none-eabi-g++ "${cxxflags[@]}" "${inc[@]}" -include "$out/ops.h" -DREPEAT=1 \
            -DTFLM_INT8_REGISTRATIONS -c bench/tflm_harness.cc -o "$out/harness-int8.o"
        arm-none-eabi-g++ "${ldflags[@]}" "$out/start.o" "$out/harness-int8.o" \
            "$out/libtflm_model.a" "$lib" -lm -Wl,-Map="$i8.map" -o "$i8"
        timeout 900 nice -n 10 qemu-system-arm -M "$board" -nographic -semihosting -kernel "$i8" \
            >"$i8.out" 2>"$i8.err" </dev/null || true
        read -r i8lib i8model _ _ < <(peer_py flash "$i8.map")
        if ! grep -q "^status 0" "$i8.out" || [ "$(grep '^out' "$i8.out")" != "$(grep '^out' "$out/$model-r1.elf.out")" ]; then
            echo "# tflm_peer: $model $core: int8-only registrations: output differs or run failed" >&2
            status=1
        fi
        one="$out/$model-r1.elf"
        many="$out/$model-r$((1 + REPEAT)).elf"
        c1=$(awk '/^insns/{print $2}' "$one.insns")
        cn=$(awk '/^insns/{print $2}' "$many.insns")
        insns=$(python3 -c "q=($cn-$c1)/$REPEAT; print(int(q) if q==int(q) else f'{q:.1f}')")
        arena=$(awk '/^arena_used_bytes/{print $2}' "$many.out")
        stack=$(awk '/^stack_high_water/{print $2}' "$many.out")
        checksum=$(awk '/^out0/{for(i=1;i<=NF;i++) if ($i ~ /^checksum=/) {sub("checksum=","",$i); print $i}}' "$many.out")
        read -r flib fmodel ftotal fparts < <(peer_py flash "$one.map")
        kern="$(peer_py kernels "$one" "$one.tbs" "$many" "$many.tbs" "$REPEAT")"
        cmsis=$(arm-none-eabi-nm "$one" | grep -oE ' arm_(convolve|depthwise_conv|nn_mat_mult|fully_connected|elementwise_add|avgpool|softmax)[a-z0-9_]*' | sort -u | tr -d ' ' | tr '\n' ' ')
        echo "# tflm_peer: $model $core ($board): count(1)=$c1 count($((1 + REPEAT)))=$cn; stack_high_water $stack; flash by source: $fparts" >&2
        echo "# tflm_peer: $model $core: per inference: $kern" >&2
        echo "# tflm_peer: $model $core: CMSIS-NN symbols: ${cmsis:-NONE}" >&2
        echo "# tflm_peer: $model $core: $(grep '^out0' "$many.out")" >&2
        [ -n "$cmsis" ] || { echo "# tflm_peer: $model $core: no CMSIS-NN kernel linked" >&2; status=1; }
        echo "tflm-peer $model $core insns=$insns arena=$arena flash=$((flib + fmodel)) flash_lib=$flib flash_model=$fmodel flash_total=$ftotal flash_int8=$((i8lib + i8model)) stack=$stack out=$checksum"
    done
done
exit $status
