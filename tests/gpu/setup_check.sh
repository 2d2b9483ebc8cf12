#!/usr/bin/env bash
# Issue 17 item 5: a default run's wall time on this machine, fresh processes: the default CLI run
# three times (the first fills the tool's bytecode cache where Python writes none), the setup's
# parts with and without cached bytecode, a hand-written loop's wall time (the floor), a cProfile of
# one run, then the gpu tests in $GPU_TESTS. RUNS sets the number of default runs (3);
# SOURCE_PARTS=0 skips the setup parts compiled from source.
# Usage: OUT=dir [RUNS=n] [SOURCE_PARTS=0] [GPU_TESTS="tests/test_x.py ..."] bash tests/gpu/setup_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpu-out}; w=$OUT/work; mkdir -p "$w"
export XDG_CACHE_HOME="$w/cache"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv
nvidia-smi --query-compute-apps=pid,used_memory --format=csv; nproc; uptime
python3 -c "import sys, os; print('dont_write_bytecode', sys.flags.dont_write_bytecode, 'PYTHONDONTWRITEBYTECODE', os.environ.get('PYTHONDONTWRITEBYTECODE'))"
echo "=== setup parts, fresh processes, every module compiled from source ($(date -u +%T))"
[ "${SOURCE_PARTS:-1}" = 1 ] && for n in 1 2; do python3 tests/gpu/setup_parts.py seed; done
for n in $(seq 1 "${RUNS:-3}"); do
  echo "=== default run $n ($(date -u +%T))"
  s=$(date +%s.%N)
  timeout 120 python3 -m profiler_core run --preset seed --out "$w/default-$n" --progress none --timings \
    > "$w/default-$n.txt" 2> "$w/default-$n.err"
  echo "rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
  grep -v -e _warn_once -e "UserWarning" "$w/default-$n.err" | tail -25
  grep -E "^Speedup|^Predicted" "$w/default-$n.txt"
done
du -sh "$w/cache/cuda-graph-profiler/bytecode" 2>/dev/null
echo "=== setup parts, bytecode from the tool's cache ($(date -u +%T))"
for n in 1 2; do
  PYTHONPYCACHEPREFIX="$w/cache/cuda-graph-profiler/bytecode" PYTHONDONTWRITEBYTECODE= python3 tests/gpu/setup_parts.py seed
done
echo "=== the bare loop (profiler_core/timing/bare_loop.py, seed fp32), fresh processes, cached bytecode"
for n in 1 2; do
  s=$(date +%s.%N)
  PYTHONPYCACHEPREFIX="$w/cache/cuda-graph-profiler/bytecode" PYTHONDONTWRITEBYTECODE= timeout 120 \
    python3 profiler_core/timing/bare_loop.py | cut -c1-200
  echo "rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,2))") s"
done
echo "=== cProfile of a default run ($(date -u +%T))"
timeout 120 python3 tests/gpu/profile_run.py "$w/prof" --preset seed 2>&1 | grep -v -e _warn_once -e UserWarning | cut -c1-180
if [ -n "${GPU_TESTS:-}" ]; then
  echo "=== pytest -m gpu $GPU_TESTS ($(date -u +%T))"
  timeout "${PYTEST_TIMEOUT:-380}" python3 -m pytest -m gpu -v -p no:cacheprovider --durations=12 $GPU_TESTS 2>&1 \
    | grep -v -e "^\[" -e _warn_once -e UserWarning | tail -${PYTEST_TAIL:-60}
fi
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/setup_check.log"
rm -rf "$w"/*/trace_* "$w/cache" 2>/dev/null
