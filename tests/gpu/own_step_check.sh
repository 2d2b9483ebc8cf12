#!/usr/bin/env bash
# Issue 26 on a GPU: your own step exactly as you run it. PART=tests: the own-step GPU tests and
# the engine's GPU tests, then a ResNet-50 (batch 1) run's summary; PART=bench: bench --workload
# over ResNet-50 batch 1 (the tool against a bare loop over the same build, alternating fresh
# processes) and the ResNet-50 batch sweep 1..64, tarred for the bundled sample.
# Usage: OUT=dir PART=tests|bench bash tests/gpu/own_step_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/gpu-cache  # the tool's bytecode cache (the VM writes none), not sent back
RESNET=profiler_core.examples.resnet50_step:build
quiet() { grep -v -e "^\[" -e _warn_once -e UserWarning -e "warnings.warn"; }
case "${PART:-tests}" in
  tests)
    echo "=== gpu tests ($(date -u +%T))"
    timeout "${TESTS_TIMEOUT:-470}" python3 -m pytest -m gpu -q -s -p no:cacheprovider --durations=8 \
      ${GPU_TESTS:-tests/test_own_step_gpu.py tests/test_gpu.py tests/test_roundtrip.py tests/test_predict.py tests/test_ddp_gpu.py} \
      2>&1 | quiet | tee "$OUT/gpu-tests.log" | tail -70
    echo "=== resnet50 batch 1 ($(date -u +%T))"
    timeout 100 python3 -m profiler_core run --workload "$RESNET" --workload-arg batch=1 \
      --out /tmp/resnet50-b1 --progress none > "$OUT/resnet50-b1.txt" 2>&1
    grep -e "^Speedup" -e "^Parity" -e "^numerics" -e "Note: parity" "$OUT/resnet50-b1.txt"
    ;;
  bench)
    echo "=== bench resnet50 batch 1 ($(date -u +%T))"
    timeout "${BENCH_TIMEOUT:-330}" python3 -m profiler_core bench --workload "$RESNET" \
      --workload-arg batch=1 --rounds "${ROUNDS:-6}" --out "$OUT/bench-resnet50" 2>&1 | tr '\r' '\n' \
      | grep -v "^\[" | tail -30
    echo "=== resnet50 batch sweep ($(date -u +%T))"
    mkdir -p /tmp/sweeps
    timeout "${SWEEP_TIMEOUT:-230}" python3 -m profiler_core sweep --workload "$RESNET" \
      --param batch=1:64:x2 --profile-iters 3 --out /tmp/sweeps/resnet50-fp32-batch --progress none 2>&1 | tail -25
    tar czf "$OUT/resnet50-fp32-batch.tgz" -C /tmp/sweeps resnet50-fp32-batch
    ls -la "$OUT"
    ;;
esac
echo "=== done ($(date -u +%T))"
