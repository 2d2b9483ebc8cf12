#!/usr/bin/env bash
# The session's last GPU call: the bundled sample re-recorded (seed bf16, every mode), a run of
# changing shapes for the Shapes sample (the transformer, seq_len log-normal), ResNet-50's parity
# verdict, and the GPU tests of the run's sequence (round trip) and of a data-parallel rank.
# Usage: OUT=dir bash tests/gpu/final_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/gpu-cache
work=/tmp/final-work; rm -rf "$work"; mkdir -p "$work"
{
echo "=== sample ($(date -u +%T))"
timeout 150 python3 -m profiler_core run --preset seed --dtype bf16 \
  --modes eager,graph,graphed_callables,compile,compile_ro --out "$work/sample_run" --progress none \
  | grep -e "^Speedup" -e "^Parity" -e "^numerics" -e "Predicted" \
  && tar -czf "$OUT/sample_run.tgz" -C "$work" sample_run
echo "=== shapes ($(date -u +%T))"
timeout "${SHAPES_TIMEOUT:-260}" python3 -m profiler_core run --preset transformer \
  --vary seq_len=lognormal:128:0.6:512 --buckets pow2 --replays 300 --parity-steps 3 \
  --out "$work/transformer-lengths" --progress none | sed -n '/Every strategy/,/^$/p;/Verdict/p;/Note: parity/p;/Note: compile/p'
echo "exit $?"
[ -d "$work/transformer-lengths" ] && tar -czf "$OUT/shapes_sample.tgz" -C "$work" transformer-lengths
echo "=== resnet50 b1 ($(date -u +%T))"
timeout 90 python3 -m profiler_core run --workload profiler_core.examples.resnet50_step:build \
  --workload-arg batch=1 --no-nvml --out "$work/r50" --progress none | grep -e "^Speedup" -e "^Parity"
echo "=== gpu tests ($(date -u +%T))"
timeout "${TESTS_TIMEOUT:-150}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_roundtrip.py \
  tests/test_ddp_gpu.py tests/test_own_step_gpu.py::test_a_grad_scaler_inside_the_step_is_named_at_capture \
  2>&1 | tail -6
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/final.log"
