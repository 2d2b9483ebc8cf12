#!/usr/bin/env bash
# Issue 17's tool-vs-bare table on the GPU: the project's benchmark (tool's default run against a
# hand-written loop, alternating fresh processes), the tool's --repeats headline with its
# between-process interval, and one default run's wall time with Python's import times.
# Usage: OUT=dir ROUNDS=6 CONFIGS=seed-fp32,seed-bf16 bash tests/gpu/bench_repeats.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT/work"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uptime
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
echo "=== bench ($(date -u +%T))"
timeout "${BENCH_TIMEOUT:-380}" python3 -m profiler_core bench --rounds "${ROUNDS:-6}" \
  --configs "${CONFIGS:-seed-fp32,seed-bf16}" --out "$OUT/bench" 2>&1 | grep -v "^\s*\[" | tail -40
for dtype in ${REPEAT_DTYPES:-bf16}; do
  echo "=== repeats seed $dtype ($(date -u +%T))"
  s=$(date +%s.%N)
  timeout 150 python3 -m profiler_core run --preset seed --dtype "$dtype" --repeats "${REPEATS:-6}" \
    --out "$OUT/work/repeats-$dtype" --progress none 2>&1 | tail -25
  echo "repeats wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
done
echo "=== default run with import times ($(date -u +%T))"
s=$(date +%s.%N)
python3 -X importtime -m profiler_core run --preset seed --out "$OUT/work/default" --progress none \
  2> "$OUT/importtime.txt" > "$OUT/default-run.txt"
echo "default run rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -8
python3 - "$OUT/work/default" <<'PY'
import sys, pandas as pd
p = pd.read_csv(sys.argv[1] + "/phases.csv")
print(p.groupby("phase", sort=False).agg(start=("start_s", "min"), end=("end_s", "max")).assign(s=lambda d: d.end - d.start).round(2).to_string())
PY
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/bench_repeats.log"
rm -rf "$OUT/work/"*/trace_*
