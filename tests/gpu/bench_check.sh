#!/usr/bin/env bash
# The project's benchmark on a GPU for the figures issues 29 and 30 ask for, in one device call
# (about 8 minutes): a GPT-style own step over a file of lengths against a bare loop padding the
# same way (3 rounds; the tool times eager, pad_max and buckets, as the bare loop does), then
# ResNet-50 at batch 1 against a bare loop (6 rounds), each table under $OUT.
# Usage: OUT=dir bash tests/gpu/bench_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/gpu-cache
{
BENCH_TIMEOUT=${GPT_TIMEOUT:-260} OUT="$OUT" bash "$(dirname "$0")/shapes_check.sh" bench
echo "=== bench, ResNet-50 batch 1 ($(date -u +%T))"
timeout "${RESNET_TIMEOUT:-280}" python3 -m profiler_core bench \
  --workload profiler_core.examples.resnet50_step:build --workload-arg batch=1 --rounds 6 \
  --out "$OUT/bench-r50" 2>&1 | tr '\r' '\n' | grep -v -e '^\[' -e Warning | tail -16
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/bench.log"
