#!/usr/bin/env bash
# One GPU call after the package restructure (issue 19) and the run model: every gpu-marked test,
# the default CLI run twice with its wall-time breakdown (the first fills the calibration cache,
# the second reads it), the broken demo workloads, and the DDP checks when present.
# Usage: OUT=dir bash tests/gpu/restructure_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; w=$OUT/work; mkdir -p "$w"
export XDG_CACHE_HOME="$w/cache"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
echo "=== pytest -m gpu ($(date -u +%T))"
timeout "${PYTEST_TIMEOUT:-330}" python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 \
  tests/test_gpu.py tests/test_roundtrip.py tests/test_predict.py tests/test_launcher.py \
  tests/test_sweep.py ${DDP_TESTS:-} 2>&1 | grep -v "^\[" | tail -30
for n in 1 2; do
  echo "=== default run $n ($(date -u +%T))"
  s=$(date +%s.%N)
  timeout 120 python3 -m profiler_core run --preset seed --out "$w/default-$n" --progress none --timings \
    > "$w/default-$n.txt" 2> "$w/default-$n.err"
  echo "rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
  cat "$w/default-$n.err" | tail -30
  grep -E "^Speedup|^Predicted" "$w/default-$n.txt"
done
for broken in broken-host-sync broken-cpu-tensor broken-optimizer; do
  timeout 60 python3 -m profiler_core run --workload $broken --replays 10 --trials 2 --out "$w/$broken" \
    --progress none > /dev/null 2> "$w/$broken.err"
  echo "--workload $broken: exit $? :: $(tail -1 "$w/$broken.err" | cut -c1-220)"
done
if [ -f tests/gpu/ddp_check.sh ]; then
  echo "=== ddp ($(date -u +%T))"
  OUT="$OUT/ddp" timeout "${DDP_TIMEOUT:-150}" bash tests/gpu/ddp_check.sh 2>&1 | tail -40
fi
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/restructure_check.log"
rm -rf "$w"/*/trace_* "$OUT"/ddp/*/trace_* 2>/dev/null
