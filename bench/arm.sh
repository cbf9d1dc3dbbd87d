#!/usr/bin/env bash
# The Arm bench (issue 42): deterministic instruction counts of xla-aot's compiled models on the
# emulated Cortex-M4/M7/M33/M55 boards and on aarch64 (qemu-aarch64), per inference and per
# kernel, with flash and RAM; then the llvm-mca certificates of the kernels' innermost loops.
#
#   bench/arm.sh                                   # every example model on every core, then certificates
#   bench/arm.sh --models mlp --cores m4,m55       # any bench/arm_bench.py options
#   bench/arm.sh --model kws=/path/kws.onnx --check
#   ARM_BENCH_MCA=0 bench/arm.sh                   # counts only
#
# Contract: installs what it needs beyond scripts/test.sh's tools when missing (apt: qemu-user,
# qemu-system-arm, gcc-arm-none-eabi, libnewlib-arm-none-eabi, gcc-aarch64-linux-gnu, llvm-19),
# builds the counting plugin (scripts/build_qemu_plugin.sh: QEMU 7.2's plugin header from
# $QEMU_SRC or Debian's qemu source package), uses the compiler at $XLA_AOT, else
# target/release/xla-aot, else target/debug/xla-aot (building the release one if neither exists),
# and prints bench/arm_bench.py's lines (`arm-bench MODEL CORE ours=... peer=... ...`, one per model
# and core) followed by bench/arm_mca.py's (`mca ...`). Every figure is a count of instructions or
# a static cycle estimate, never a time. Exit status: non-zero when a model/core pair failed.
# Not part of scripts/test.sh or CI.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
command -v arm-none-eabi-gcc >/dev/null || need+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
if [ "${ARM_BENCH_MCA:-1}" != 0 ]; then
    command -v llvm-mca-19 >/dev/null || need+=(llvm-19)
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "# arm.sh: installing ${need[*]} (apt)"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

plugin="$(scripts/build_qemu_plugin.sh | tail -n1)"

if [ -z "${XLA_AOT:-}" ]; then
    if [ -x target/release/xla-aot ]; then
        XLA_AOT=target/release/xla-aot
    elif [ -x target/debug/xla-aot ]; then
        XLA_AOT=target/debug/xla-aot
    else
        cargo build --release -p xla-aot --bin xla-aot
        XLA_AOT=target/release/xla-aot
    fi
fi
export XLA_AOT="$(realpath "$XLA_AOT")"

py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python

status=0
"$py" bench/arm_bench.py --plugin "$plugin" "$@" || status=$?
if [ "${ARM_BENCH_MCA:-1}" != 0 ]; then
    "$py" bench/arm_mca.py || status=$?
fi
exit $status
