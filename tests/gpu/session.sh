#!/usr/bin/env bash
# One GPU session on the lent H200 (or any CUDA machine). Parts, in the order given:
#   pytest    the gpu-marked engine tests (tests/test_gpu.py)
#   dashboard the gpu-marked dashboard test and the render timing (needs streamlit: see README)
#   cli       the CLI on the presets, the broken workloads and a config too large for the GPU
#   sample    re-records the dashboard's bundled sample run (seed, bf16, every mode) into $OUT/sample_run.tgz
#   modes     every mode on seed bf16, the transformer and the conv presets (modes.csv printed)
#   bench     python -m profiler_core bench (the tool's default run vs a bare loop, fresh processes;
#             BENCH_QUIET=1 adds the tool with profiler/NVML off as a fourth process per round)
# Everything lands under $OUT: a log, gpu-results.tar.gz (run directories, bench tables).
# Usage: OUT=/some/dir bash tests/gpu/session.sh [pytest|dashboard|cli|sample|bench ...]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}
work=$OUT/work
mkdir -p "$work"
parts=${*:-pytest cli sample bench}
log=$OUT/session.log
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  for part in $parts; do
    echo "=== $part ($(date -u +%T))"
    case $part in
      pytest)
        timeout "${PYTEST_TIMEOUT:-540}" python3 -m pytest -m gpu tests/test_gpu.py -q -s -p no:cacheprovider 2>&1 | grep -v -e "^\[" ;;
      dashboard)
        timeout 300 python3 -m pytest -m gpu tests/test_dashboard.py -q -s -p no:cacheprovider 2>&1 | tail -5
        last=$(ls -td "$work"/seed-bf16 2>/dev/null | head -1)
        [ -n "$last" ] && timeout 120 python3 tests/gpu/render_timing.py "$last" ;;
      cli)
        for preset in lesson1 lesson2 lesson3; do
          timeout 60 python3 -m profiler_core run --preset $preset --out "$work/$preset" --progress none \
            | sed -n '/Counters/,/^$/p'
        done
        timeout 120 python3 -m profiler_core run --preset seed --out "$work/seed-fp32" --progress none
        timeout 120 python3 -m profiler_core run --preset seed --dtype bf16 --out "$work/seed-bf16" --progress none
        timeout 120 python3 -m profiler_core run --batch 64 --d-in 512 --hidden 512 --d-out 256 --out "$work/launch-bound" --progress none
        timeout 60 python3 -m profiler_core run --warmup-iters 2 --capture-iters 4 --replays 7 --out "$work/few-replays" --progress none | grep -E "Workload|Speedup"
        echo "exit code for --replays 7 with 4 steps per graph: $?"
        timeout 30 python3 -m profiler_core run --batch 0 --out "$work/bad"; echo "exit code for --batch 0: $?"
        for broken in broken-host-sync broken-cpu-tensor broken-optimizer; do
          timeout 60 python3 -m profiler_core run --workload $broken --replays 10 --trials 2 --out "$work/$broken" --progress none
          echo "exit code for --workload $broken: $?"
        done
        timeout 60 python3 -m profiler_core run --batch 131072 --d-in 16384 --hidden 16384 --d-out 16384 --out "$work/huge"
        echo "exit code for a config too large for the GPU: $?" ;;
      modes)
        all_modes=eager,graph,graphed_callables,compile,compile_ro
        for spec in "seed --dtype bf16" transformer conv; do
          name=modes-${spec%% *}
          timeout "${MODES_TIMEOUT:-200}" python3 -m profiler_core run --preset $spec --modes $all_modes \
            --out "$work/$name" --progress none | tail -25
          echo "exit code for $name: $?"
          cat "$work/$name/modes.csv"
        done ;;
      sample)
        rm -rf "$work/sample_run"
        timeout 120 python3 -m profiler_core run --preset seed --dtype bf16 \
          --modes eager,graph,graphed_callables,compile,compile_ro --out "$work/sample_run" --progress none \
          && tar -czf "$OUT/sample_run.tgz" -C "$work" sample_run ;;
      bench)
        timeout "${BENCH_TIMEOUT:-560}" python3 -m profiler_core bench --rounds "${BENCH_ROUNDS:-6}" \
          --configs "${BENCH_CONFIGS:-seed-fp32,seed-bf16,launch-bound-fp32}" ${BENCH_QUIET:+--quiet-tool} \
          --out "$work/bench-${BENCH_TAG:-all}" ;;
    esac
    tar -czf "$OUT/gpu-results.tar.gz" --exclude='trace_*' -C "$work" .  # after each part
  done
  echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$log"
