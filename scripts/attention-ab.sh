#!/usr/bin/env bash
# On the GPU machine: the attention kernels' GPU tests, then W7 and W10 in one benchmark run with them (fc, fc-ro:
# fastcomp.config.fused_attention is on by default) and without them (fc-noattn, fc-ro-noattn), next to eager and
# torch.compile reduce-overhead.
# Usage: scripts/attention-ab.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/attention-ab}
mkdir -p "$out"
python3 -m pip install --no-build-isolation --no-deps -q -e . 2>&1 | grep -v "Running pip as the 'root' user" || true
python3 -m pytest -q -p no:cacheprovider -m gpu tests/codegen/test_emit_attention.py tests/backend/test_cuda_backend.py \
  tests/test_workloads.py -k "attention or fused or mha or sdpa or W7 or W10" > "$out/gpu-tests.txt" 2>&1 || true
tail -3 "$out/gpu-tests.txt"
python3 -m benchmarks --sections workloads --workloads W7,W10 --modes eager,tc-ro,fc,fc-ro,fc-noattn,fc-ro-noattn \
  --out "$out/bench" > "$out/bench.txt" 2>&1 || true
grep -h "^| W" "$out"/bench/*.md || true
