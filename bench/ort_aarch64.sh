#!/usr/bin/env bash
# onnxruntime's instructions per inference on aarch64 under qemu-aarch64 (issue 42, item 2): the
# peer figures of bench/arm.sh's aarch64 rows. Installs qemu-user when missing, builds the
# counting plugin (scripts/build_qemu_plugin.sh), then runs bench/ort_aarch64.py with the .venv's
# Python (see its docstring: what it installs under target/, what it prints, and
# target/ort-aarch64.json, which bench/arm_bench.py reads).
#
#   bench/ort_aarch64.sh                                  # every model, aarch64-neon and aarch64-a78
#   bench/ort_aarch64.sh --models squeezenet --cores aarch64-a78 --reps 1
#
# Counts of instructions under QEMU's TCG, never times. Not part of scripts/test.sh or CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v qemu-aarch64 >/dev/null; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-user >/dev/null
fi
plugin="$(scripts/build_qemu_plugin.sh | tail -n1)"
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
exec nice -n 10 "$py" bench/ort_aarch64.py --plugin "$plugin" "$@"
