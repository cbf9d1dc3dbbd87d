#!/usr/bin/env bash
# The NVIDIA path on a real GPU: builds xla-aot, compiles every example for this host's CUDA target
# (cuda-x86_64 on x86-64, jetson-orin on aarch64), runs each on the GPU through its library's
# launcher, compares with the golden outputs and with the library's CPU path, and prints the run
# time and each kernel's time (scripts/gpu_check.c). About a minute on a 16-core machine (most of
# it the release build); well under 5.
#
#   scripts/gpu-check.sh [TARGET]
#
# Environment: XLA_AOT (a compiler binary; default: build this checkout's in release mode),
# GPU_CHECK_ITERS (timed iterations, default 100), CC (default cc).
# Exit status: 0 all match; 1 a mismatch or a driver error; 2 no NVIDIA driver or GPU here.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-$(uname -m)}" in
  x86_64) target=cuda-x86_64 ;;
  aarch64) target=jetson-orin ;;
  *) target=$1 ;;
esac
iters=${GPU_CHECK_ITERS:-100}
cc=${CC:-cc}
if [ -z "${XLA_AOT:-}" ]; then
  echo "gpu-check: building xla-aot (release)" >&2
  cargo build --release -q -p xla-aot
  XLA_AOT=target/release/xla-aot
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
examples="simplenet mlp mobilenet_block tiny_transformer"
passed=0
total=0
for ex in $examples; do
  dir="$out/$ex"
  "$XLA_AOT" compile "examples/$ex/model.yaml" --target "$target" --out-dir "$dir" >/dev/null
  upper=$(echo "$ex" | tr '[:lower:]' '[:upper:]')
  "$cc" -O2 -std=c11 -Wall -Werror -DMODEL="$ex" -DUPPER="$upper" -DHEADER="\"$ex.h\"" -I"$dir" \
    scripts/gpu_check.c "$dir/lib$ex.a" -ldl -lm -o "$dir/check"
  # Golden inputs and outputs in the order of the manifest (parameter order, output order).
  files=$(python3 - "$dir/$ex.json" "examples/$ex/golden" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
g = sys.argv[2]
print(len(m["inputs"]), len(m["outputs"]),
      *[f"{g}/inputs/{t['name']}.npy" for t in m["inputs"]],
      *[f"{g}/expected/{t['name']}.npy" for t in m["outputs"]])
PY
)
  total=$((total + 1))
  set +e
  # shellcheck disable=SC2086 # $files is a list of words
  "$dir/check" "$iters" $files
  status=$?
  set -e
  case $status in
    0) passed=$((passed + 1)) ;;
    2) echo "gpu-check: no NVIDIA driver or GPU on this machine; nothing to check" >&2; exit 2 ;;
    *) echo "gpu-check: $ex FAILED (status $status)" ;;
  esac
done
echo "gpu-check: $passed of $total examples match on the GPU ($target)"
[ "$passed" -eq "$total" ]
