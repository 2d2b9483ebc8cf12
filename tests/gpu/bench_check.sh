#!/usr/bin/env bash
# The project's benchmark on a GPU for the figures issues 29 and 30 ask for, one device call per
# part: `gpt`, a GPT-style own step over a file of lengths against a bare loop padding the same
# way (6 rounds, about 540 s on the H200; the tool times eager, pad_max and buckets, as the bare
# loop does), and `r50`, ResNet-50 at batch 1 against a bare loop (6 rounds, about 300 s), each
# table under $OUT. Both parts together are more than one call's 600 s.
# Usage: OUT=dir bash tests/gpu/bench_check.sh gpt   (then, in a second call: ... r50)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/gpu-cache
parts=${*:-gpt}
want() { [[ " $parts " == *" $1 "* ]]; }
{
if want gpt; then
BENCH_ROUNDS=${GPT_ROUNDS:-6} BENCH_TIMEOUT=${GPT_TIMEOUT:-570} OUT="$OUT" \
  bash "$(dirname "$0")/shapes_check.sh" bench
fi
if want r50; then
echo "=== bench, ResNet-50 batch 1 ($(date -u +%T))"
timeout "${RESNET_TIMEOUT:-330}" python3 -m profiler_core bench \
  --workload profiler_core.examples.resnet50_step:build --workload-arg batch=1 --rounds 6 \
  --out "$OUT/bench-r50" 2>&1 | tr '\r' '\n' | grep -v -e '^\[' -e Warning | tail -16
fi
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/bench.log"
