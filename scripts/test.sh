#!/usr/bin/env bash
# The README's test command: installs what the tests need, then runs them.
#
#   scripts/test.sh                      # every test of the workspace (cargo test --workspace)
#   scripts/test.sh -p xla-aot --test compiled    # any other `cargo test` arguments
#
# Needs only what the main job needs (a Rust toolchain, LLVM 14, a C compiler, python3). It
# installs, once:
#   - apt packages: the aarch64 cross compiler and qemu-user (compiled code for aarch64 runs under
#     qemu-aarch64), make (the C example), cmake (the CMake example), the bare-metal Arm tools
#     (gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm: tests/mcu.rs runs models on
#     emulated Cortex-M boards); as root, or through sudo;
#   - a virtual environment `.venv` with numpy (golden data), ptxas from NVIDIA's
#     `nvidia-cuda-nvcc-cu12` wheel (the PTX backend's output is checked by ptxas; no GPU needed)
#     onnx (the ONNX backend node tests, written to target/onnx-node) and onnxruntime (the
#     reference outputs of onnx's nine light models, written to target/onnx-light);
#   - on x86-64, into the same `.venv`: tensorflow-cpu (its converter writes the .tflite models of
#     scripts/tflite_models.py, to target/tflite), tflite-micro (TFLite Micro's interpreter: their
#     reference outputs) and ai-edge-litert (LiteRT's reference kernels: the outputs of those
#     TFLite Micro refuses);
# and exports XLA_AOT_PTXAS, XLA_AOT_ONNX_NODE_DIR, XLA_AOT_ONNX_LIGHT_DIR,
# XLA_AOT_ONNX_PATTERNS_DIR (scripts/onnx_patterns.py), XLA_AOT_ONNX_CONTRIB_DIR
# (scripts/onnx_contrib.py), XLA_AOT_ONNX_QUANT_DIR (scripts/onnx_quantized.py),
# XLA_AOT_TFLITE_DIR (scripts/tflite_models.py) and XLA_AOT_MCU=1 (the Cortex-M board runs),
# which make those tests mandatory.
# `.ci/run` calls this same script. Set XLA_AOT_TEST_NO_INSTALL=1 to install nothing (tests whose
# tools are missing then fail and say which tool).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned where the tests compare numbers against the package's output.
NUMPY=numpy==2.4.6
ONNX=onnx==1.23.2
ONNXRUNTIME=onnxruntime==1.32.0
# onnxruntime.transformers' optimizer (scripts/onnx_contrib.py's fused BERT layer) infers shapes
# with sympy.
SYMPY=sympy==1.14.0
NVCC=nvidia-cuda-nvcc-cu12
# The TensorFlow Lite reference data (scripts/tflite_models.py): TensorFlow's converter writes the
# models, TFLite Micro's interpreter (a dev wheel: it has no releases) and LiteRT's reference
# kernels give the outputs. tensorflow-cpu and tflite-micro ship x86-64 Linux wheels only.
TENSORFLOW=tensorflow-cpu==2.21.0
TFLITE_MICRO=tflite-micro==0.dev20261023182759
LITERT=ai-edge-litert==2.3.0

say() { echo "test.sh: $*" >&2; }

install_apt() {
  local need=()
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
  command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  command -v make >/dev/null || need+=(make)
  command -v cmake >/dev/null || need+=(cmake)
  command -v arm-none-eabi-gcc >/dev/null || need+=(gcc-arm-none-eabi)
  [ -e /usr/lib/arm-none-eabi/newlib/librdimon.a ] || need+=(libnewlib-arm-none-eabi)
  command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
  [ ${#need[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
      sudo="sudo"
    else
      say "missing ${need[*]}: run \`apt-get install -y ${need[*]}\` as root, then rerun"
      exit 1
    fi
  fi
  say "installing ${need[*]} (apt)"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
}

install_venv() {
  if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    python3 -m venv .venv
  fi
  # pip is quick when everything is already there; the stamp skips even that.
  local stamp=.venv/.xla-aot-test-deps
  if [ "$(cat "$stamp" 2>/dev/null)" != "$NUMPY $ONNX $ONNXRUNTIME $SYMPY $NVCC" ]; then
    say "installing $NUMPY $ONNX $ONNXRUNTIME $SYMPY $NVCC into .venv (pip)"
    .venv/bin/pip install --quiet --disable-pip-version-check "$NUMPY" "$ONNX" "$ONNXRUNTIME" "$SYMPY" "$NVCC"
    echo "$NUMPY $ONNX $ONNXRUNTIME $SYMPY $NVCC" >"$stamp"
  fi
  # TensorFlow, TFLite Micro and LiteRT (about 25 s and 1.5 GB, download 340 MB), with a stamp of
  # their own; numpy stays at its pin (tensorflow-cpu takes it, and changes nothing else of the
  # above).
  [ "$(uname -m)" = x86_64 ] || return 0
  stamp=.venv/.xla-aot-tflite-deps
  if [ "$(cat "$stamp" 2>/dev/null)" != "$NUMPY $TENSORFLOW $TFLITE_MICRO $LITERT" ]; then
    say "installing $TENSORFLOW $TFLITE_MICRO $LITERT into .venv (pip)"
    .venv/bin/pip install --quiet --disable-pip-version-check "$NUMPY" "$TENSORFLOW" "$TFLITE_MICRO" "$LITERT"
    echo "$NUMPY $TENSORFLOW $TFLITE_MICRO $LITERT" >"$stamp"
  fi
}

if [ "${XLA_AOT_TEST_NO_INSTALL:-0}" != 1 ]; then
  install_apt
  install_venv
fi

if [ -x .venv/bin/python ]; then
  ptxas="$(ls "$PWD"/.venv/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas 2>/dev/null | head -n 1 || true)"
  if [ -n "$ptxas" ]; then
    export XLA_AOT_PTXAS="${XLA_AOT_PTXAS:-$ptxas}"
  fi
  # The ONNX backend node tests: onnx's wheel does not ship the cases, so write them (about 15 s,
  # once per onnx version).
  cases=target/onnx-node
  version="$(.venv/bin/python -c 'import onnx; print(onnx.__version__)' 2>/dev/null || true)"
  if [ -n "$version" ]; then
    if [ "$(cat "$cases/.onnx-version" 2>/dev/null)" != "$version" ]; then
      say "writing the ONNX node test cases of onnx $version to $cases"
      .venv/bin/python scripts/onnx_node_tests.py --out "$cases" >/dev/null
      echo "$version" >"$cases/.onnx-version"
    fi
    export XLA_AOT_ONNX_NODE_DIR="${XLA_AOT_ONNX_NODE_DIR:-$PWD/$cases}"
  fi
  # onnx's nine light models with seeded random weights and onnxruntime's outputs (about a
  # minute and 1.3 GB, once per onnx/onnxruntime version and generator script).
  light=target/onnx-light
  ort="$(.venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null || true)"
  if [ -n "$version" ] && [ -n "$ort" ]; then
    want="onnx $version onnxruntime $ort $(sha1sum scripts/onnx_light_models.py | cut -d' ' -f1)"
    if [ "$(cat "$light/.stamp" 2>/dev/null)" != "$want" ]; then
      say "writing onnx's light models and onnxruntime $ort's outputs to $light"
      .venv/bin/python scripts/onnx_light_models.py --out "$light" >/dev/null
      echo "$want" >"$light/.stamp"
    fi
    export XLA_AOT_ONNX_LIGHT_DIR="${XLA_AOT_ONNX_LIGHT_DIR:-$PWD/$light}"
    # Small exports of real-model patterns with dynamic dims (a few seconds).
    patterns=target/onnx-patterns
    want="onnx $version onnxruntime $ort $(sha1sum scripts/onnx_patterns.py | cut -d' ' -f1)"
    if [ "$(cat "$patterns/.stamp" 2>/dev/null)" != "$want" ]; then
      say "writing the ONNX pattern models and onnxruntime $ort's outputs to $patterns"
      .venv/bin/python scripts/onnx_patterns.py --out "$patterns" >/dev/null
      echo "$want" >"$patterns/.stamp"
    fi
    export XLA_AOT_ONNX_PATTERNS_DIR="${XLA_AOT_ONNX_PATTERNS_DIR:-$PWD/$patterns}"
    # fp32 models of contrib ops, Einsum, Loop/Scan, LpPool and DFT (a few seconds).
    contrib=target/onnx-contrib
    want="onnx $version onnxruntime $ort $(sha1sum scripts/onnx_contrib.py | cut -d' ' -f1)"
    if [ "$(cat "$contrib/.stamp" 2>/dev/null)" != "$want" ]; then
      say "writing the ONNX contrib/Einsum/Loop models and onnxruntime $ort's outputs to $contrib"
      .venv/bin/python scripts/onnx_contrib.py --out "$contrib" >/dev/null
      echo "$want" >"$contrib/.stamp"
    fi
    export XLA_AOT_ONNX_CONTRIB_DIR="${XLA_AOT_ONNX_CONTRIB_DIR:-$PWD/$contrib}"
    # The light squeezenet and shufflenet quantized by onnxruntime's quantizer, a dynamically
    # quantized MLP, the examples and hand-built QDQ groups. On x86-64 the script runs itself
    # under `qemu-x86_64 -cpu Nehalem` (qemu-user, installed above), so that the references are
    # the same bytes on AVX2-only and AVX-512 hosts and its integer kernels exact (about 3 min;
    # XLA_AOT_ONNX_QUANT_NATIVE=1: 10 s on this CPU's kernels, which saturate on AVX2 without
    # VNNI; the script's doc says why).
    quant=target/onnx-quantized
    want="onnx $version onnxruntime $ort $(sha1sum scripts/onnx_quantized.py scripts/onnx_light_models.py | cut -d' ' -f1 | tr '\n' ' ')"
    if [ "${XLA_AOT_ONNX_QUANT_NATIVE:-0}" = 1 ]; then want="$want native"; fi
    if [ "$(cat "$quant/.stamp" 2>/dev/null)" != "$want" ]; then
      say "writing quantized ONNX models and onnxruntime $ort's outputs to $quant (x86-64: emulated, minutes)"
      .venv/bin/python scripts/onnx_quantized.py --light "$light" --out "$quant" >/dev/null 2>&1
      echo "$want" >"$quant/.stamp"
    fi
    export XLA_AOT_ONNX_QUANT_DIR="${XLA_AOT_ONNX_QUANT_DIR:-$PWD/$quant}"
  fi
  # TensorFlow Lite models written by TensorFlow's converter, with TFLite Micro's outputs (about
  # 10 s, most of it TensorFlow's import; once per package version and generator script).
  tflite=target/tflite
  tfl="$(.venv/bin/python -c 'from importlib.metadata import version as v
print("tensorflow-cpu", v("tensorflow-cpu"), "tflite-micro", v("tflite-micro"), "ai-edge-litert", v("ai-edge-litert"))' 2>/dev/null || true)"
  if [ -n "$tfl" ]; then
    want="$tfl $(sha1sum scripts/tflite_models.py | cut -d' ' -f1)"
    if [ "$(cat "$tflite/.stamp" 2>/dev/null)" != "$want" ]; then
      say "writing TensorFlow Lite models and TFLite Micro's outputs to $tflite"
      .venv/bin/python scripts/tflite_models.py --out "$tflite" >/dev/null
      echo "$want" >"$tflite/.stamp"
    fi
    export XLA_AOT_TFLITE_DIR="${XLA_AOT_TFLITE_DIR:-$PWD/$tflite}"
  fi
fi

# The Cortex-M board runs (tests/mcu.rs) skip without their tools unless this says they were
# installed above.
if [ "${XLA_AOT_TEST_NO_INSTALL:-0}" != 1 ]; then
  export XLA_AOT_MCU="${XLA_AOT_MCU:-1}"
fi

if [ $# -eq 0 ]; then
  set -- --workspace
fi
exec cargo test "$@"
