#!/usr/bin/env bash
# One GPU session on the lent H200 (or any CUDA machine): the gpu-marked tests, the CLI on the
# presets, and the benchmark; everything lands in $OUT/gpu-results.tar.gz plus a log.
# Usage: OUT=/some/dir bash tests/gpu/session.sh [pytest|cli|bench|traces ...]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}
work=$OUT/work
mkdir -p "$work"
parts=${*:-pytest cli traces bench}
log=$OUT/session.log
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  for part in $parts; do
    echo "=== $part ($(date -u +%T))"
    case $part in
      pytest)
        timeout 300 python3 -m pytest -m gpu tests/test_gpu.py -q -s -p no:cacheprovider 2>&1 | grep -v -e "^\[" ;;
      cli)
        for preset in lesson1 lesson2 lesson3; do
          timeout 60 python3 -m profiler_core run --preset $preset --out "$work/$preset" --progress none \
            | sed -n '/Counters/,/^$/p'
        done
        timeout 120 python3 -m profiler_core run --preset seed --out "$work/seed-fp32" --progress none
        timeout 120 python3 -m profiler_core run --preset seed --dtype bf16 --out "$work/seed-bf16" --progress none
        timeout 120 python3 -m profiler_core run --batch 64 --d-in 512 --hidden 512 --d-out 256 --out "$work/launch-bound" --progress none
        timeout 30 python3 -m profiler_core run --batch 0 --out "$work/bad"; echo "exit code for --batch 0: $?"
        for broken in broken-host-sync broken-cpu-tensor broken-optimizer; do
          timeout 60 python3 -m profiler_core run --workload $broken --replays 10 --trials 2 --out "$work/$broken" --progress none
          echo "exit code for --workload $broken: $?"
        done
        timeout 60 python3 -m profiler_core run --batch 131072 --d-in 16384 --hidden 16384 --d-out 16384 --out "$work/huge"
        echo "exit code for a config too large for the GPU: $?" ;;
      traces)
        # Small real traces for the CPU tests (tests/data/): a handful of iterations per mode.
        timeout 120 python3 -m profiler_core run --batch 64 --d-in 512 --hidden 512 --d-out 256 \
          --replays 20 --trials 2 --profile-iters 4 --parity-steps 0 --no-nvml --out "$work/small-trace" --progress none >/dev/null
        timeout 120 python3 -m profiler_core run --preset seed --dtype bf16 --replays 20 --trials 2 \
          --profile-iters 4 --parity-steps 0 --no-nvml --out "$work/seed-bf16-trace" --progress none >/dev/null
        python3 -m profiler_core trace-stats "$work/small-trace/trace_graph.json" ;;
      bench)
        timeout 400 python3 -m profiler_core bench --out "$work/bench" 2>/dev/null ;;
    esac
  done
  echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$log"
tar -czf "$OUT/gpu-results.tar.gz" -C "$work" .
