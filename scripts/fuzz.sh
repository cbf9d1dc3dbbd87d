#!/usr/bin/env bash
# Builds xla-aot's libFuzzer targets (fuzz/: spec_yaml, weights, onnx_import, hlo_text,
# tflite_import) and runs each for SECONDS (default 60), seeded from the repository's own inputs.
# Exits 1 when a target finds a crash, a leak, a timeout or an out-of-memory input (its reproducer
# is in target/fuzz/artifacts/<target>/; turn it into a regression test, see docs/limits.md).
#
#   scripts/fuzz.sh                 # every target, 60 s each
#   scripts/fuzz.sh 1800 onnx_import   # one target, 30 minutes
#
# Needs the nightly toolchain (`rustup toolchain install nightly`; sanitizer coverage is a nightly
# flag) and a C++ compiler (libfuzzer-sys builds libFuzzer). The flags are cargo-fuzz's, so
# `cargo +nightly fuzz run <target>` works too where cargo-fuzz is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(spec_yaml weights onnx_import hlo_text tflite_import)
say() { echo "fuzz.sh: $*" >&2; }

# Limits a found input must stay within: an input that takes longer or allocates more is a
# finding (the compiler's own limits, docs/limits.md, must refuse such inputs first).
TIMEOUT_S=10
# libFuzzer's seed: 0 draws one; CI fixes it (XLA_AOT_FUZZ_SEED=1) so its short run explores the
# same inputs every time and a red CI means a change, not the luck of a draw.
SEED="${XLA_AOT_FUZZ_SEED:-0}"
RSS_MB=2048
MALLOC_MB=1024

export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros (as cargo-fuzz does).
HOST="$(rustc +nightly -vV | sed -n 's/^host: //p')"
say "building the fuzz targets (nightly, sanitizer coverage, $HOST)"
cargo +nightly build --manifest-path fuzz/Cargo.toml --release --target-dir target/fuzz/build \
  --target "$HOST" \
  $(printf -- '--bin %s ' "${TARGETS[@]}") >&2

# Seeds: the repository's specs, HLO texts, ONNX models, TFLite models and weight files.
seed() {
  local t="$1" dir="target/fuzz/corpus/$1"
  mkdir -p "$dir"
  case "$t" in
    spec_yaml) find examples xla-aot/tests/malformed -name '*.yaml' -size -64k -exec cp {} "$dir/" \; ;;
    hlo_text) find tests/jax -name '*.hlo.txt' -size -64k | while read -r f; do cp "$f" "$dir/$(echo "$f" | tr / _)"; done ;;
    onnx_import)
      for d in "${XLA_AOT_ONNX_NODE_DIR:-target/onnx-node}"/test_{add,conv,relu,reshape,gemm,maxpool_2d_pads,resize_upsample_scales_nearest,lstm_defaults,quantizelinear,if}; do
        if [ -f "$d/model.onnx" ]; then cp "$d/model.onnx" "$dir/$(basename "$d").onnx"; fi
      done ;;
    tflite_import)
      # The converter-written models of scripts/tflite_models.py (scripts/test.sh writes them to
      # target/tflite before CI's fuzz step: <case>/model.tflite) and any small .tflite committed.
      { find "${XLA_AOT_TFLITE_DIR:-target/tflite}" -name '*.tflite' -size -256k 2>/dev/null || true; } |
        while read -r f; do
          cp "$f" "$dir/$(basename "$(dirname "$f")")_$(basename "$f")"
        done
      { git ls-files -- '*.tflite' 2>/dev/null || true; } | while read -r f; do
        if [ "$(wc -c <"$f")" -lt 262144 ]; then cp "$f" "$dir/$(echo "$f" | tr / _)"; fi
      done ;;
    weights)
      find examples tests -name '*.npy' -size -64k -print0 | xargs -0 ls | sort | sed -n 1,20p | while read -r f; do
        { printf '\0'; cat "$f"; } >"$dir/$(echo "$f" | tr / _)"
      done
      find examples -name '*.safetensors' -size -256k | while read -r f; do
        { printf '\1'; cat "$f"; } >"$dir/$(echo "$f" | tr / _)"
      done ;;
  esac
}

found=0
for t in "${TARGETS[@]}"; do
  seed "$t"
  mkdir -p "target/fuzz/artifacts/$t"
  say "running $t for ${SECONDS_EACH}s"
  if ! "target/fuzz/build/$HOST/release/$t" "target/fuzz/corpus/$t" \
      -max_total_time="$SECONDS_EACH" -seed="$SEED" -timeout="$TIMEOUT_S" -rss_limit_mb="$RSS_MB" \
      -malloc_limit_mb="$MALLOC_MB" -max_len=262144 -print_final_stats=1 \
      -artifact_prefix="target/fuzz/artifacts/$t/" 2>"target/fuzz/$t.log"; then
    say "$t FOUND A FAILURE: $(grep -m1 -E 'ERROR|panicked|deadly|timeout|out-of-memory' "target/fuzz/$t.log" || true)"
    ls "target/fuzz/artifacts/$t" >&2
    found=1
  fi
  say "$t: $(grep -E 'stat::number_of_executed_units|stat::new_units_added' "target/fuzz/$t.log" | tr -s ' ' | tr '\n' ' ')"
done
exit $found
