#!/usr/bin/env bash
# Issue 17's GPU checks in one call: the default run's wall time and phases, a config where the
# graph does not pay, the headline's attribution on several configs (with the profiled kernel time
# against the unprofiled held replay), prediction errors, and what moves eager between processes.
# Usage: OUT=dir bash tests/gpu/trust.sh [runs|variance ...]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; w=$OUT/work; mkdir -p "$w"
parts=${*:-runs variance}
{
nproc; lscpu | grep -E "Model name|Socket|Thread|Core|NUMA node"; uptime
cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo "governor: not readable"
for part in $parts; do
  echo "=== $part ($(date -u +%T))"
  case $part in
    runs)
      s=$(date +%s.%N)
      python3 -m profiler_core run --preset seed --dtype bf16 --out "$w/seed-bf16" --progress none > "$w/seed-bf16.log" 2>&1
      echo "seed bf16 default run: rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
      python3 -m profiler_core run --preset seed --dtype fp32 --batch 2048 --out "$w/fp32-b2048" --progress none > "$w/fp32-b2048.log" 2>&1
      echo "seed fp32 batch 2048: rc $?"
      python3 -m profiler_core run --preset seed --out "$w/seed-fp32" --progress none > /dev/null 2>&1; echo "seed fp32 rc $?"
      python3 -m profiler_core run --batch 64 --d-in 512 --hidden 512 --d-out 256 --out "$w/launch-bound" --progress none > /dev/null 2>&1; echo "launch-bound rc $?"
      python3 -m profiler_core run --preset seed --dtype bf16 --hidden-layers 6 --optimizer adamw --out "$w/adamw6" --progress none > /dev/null 2>&1; echo "adamw6 rc $?"
      for p in transformer conv; do
        python3 -m profiler_core run --preset $p --out "$w/$p" --progress none > /dev/null 2>&1; echo "$p rc $?"
      done
      python3 tests/gpu/attribution_report.py "$w"/* ;;
    pytest)
      timeout "${PYTEST_TIMEOUT:-200}" python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_gpu.py \
        -k "${PYTEST_K:-seed_config or cli_seed or launch_bound or captured_before or uncapturable}" \
        tests/test_launcher.py tests/test_predict.py tests/test_sweep.py 2>&1 | grep -v "^\[" | tail -15 ;;
    repeats)
      s=$(date +%s.%N)
      timeout 150 python3 -m profiler_core run --preset seed --dtype bf16 --repeats "${REPEATS:-3}" \
        --out "$w/repeats" --progress none 2>&1 | grep -iE "process|between|speedup|repeat" | head -20
      echo "repeats run: wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" ;;
    variance)
      timeout 330 python3 tests/gpu/variance.py "$OUT/variance.csv" --rounds "${ROUNDS:-4}" ;;
  esac
  tar -czf "$OUT/trust-runs.tar.gz" --exclude='trace_*' -C "$w" .
done
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/trust.log"
