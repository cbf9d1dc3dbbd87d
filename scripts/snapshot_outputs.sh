#!/usr/bin/env bash
# Compiles every example spec for every built-in CPU and CUDA target into DIR (one folder per
# spec and target), so that a refactor can be checked byte for byte:
#   scripts/snapshot_outputs.sh /tmp/before        # on the old commit
#   scripts/snapshot_outputs.sh /tmp/after         # on the new one
#   diff -r /tmp/before /tmp/after                 # empty: the libraries are byte-identical
# Uses the release compiler (built first). Determinism is a product guarantee (same spec + target
# → byte-identical outputs), so any difference is a behaviour change to explain.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/snapshot_outputs.sh DIR}"
cargo build -q --release -p xla-aot
bin="$PWD/target/release/xla-aot"
specs=(examples/simplenet/model.yaml examples/mlp/model.yaml examples/mobilenet_block/model.yaml
       examples/tiny_transformer/model.yaml examples/tiny_lm/model.yaml examples/rust-app/mlp_batched.yaml)
targets=(x86_64 x86_64-avx2 x86_64-avx512 x86_64-multi aarch64-neon aarch64-multi jetson-orin)
rm -rf "$out"
for spec in "${specs[@]}"; do
  name="$(basename "$(dirname "$spec")")_$(basename "$spec" .yaml)"
  for t in "${targets[@]}"; do
    # Bucketed specs are refused on CUDA targets (a clear error): skip those pairs.
    if [[ "$t" == jetson-orin ]] && grep -qE "^(batch_sizes|seq_buckets):" "$spec"; then continue; fi
    "$bin" compile "$spec" --target "$t" --out-dir "$out/$name/$t" >/dev/null
  done
done
echo "wrote $(find "$out" -type f | wc -l) files under $out"
