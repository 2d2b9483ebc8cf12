#!/usr/bin/env bash
# Issue 17 item 5: where a default run's setup goes on this machine (fresh processes), the default
# CLI run's wall-time breakdown, a cProfile of one run, then the gpu tests named in $GPU_TESTS.
# Usage: OUT=dir [GPU_TESTS="tests/test_x.py ..."] bash tests/gpu/setup_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; w=$OUT/work; mkdir -p "$w"
export XDG_CACHE_HOME="$w/cache"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 - <<'PY'
import os, sys, sysconfig, torch
root = os.path.dirname(torch.__file__)
print("python", sys.executable, sys.version.split()[0], "torch", torch.__version__)
print("PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"), "flag", sys.flags.dont_write_bytecode,
      "PYTHONPYCACHEPREFIX", sys.pycache_prefix)
print("torch at", root, "writable", os.access(root, os.W_OK))
pyc = sum(len([f for f in fs if f.endswith(".pyc")]) for d, _, fs in os.walk(root) if d.endswith("__pycache__"))
py = sum(len([f for f in fs if f.endswith(".py")]) for d, _, fs in os.walk(root))
print("torch .py files", py, ".pyc files", pyc)
PY
df -hT "$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')" | tail -1
echo "=== setup parts, fresh processes ($(date -u +%T))"
for n in 1 2 3; do python3 tests/gpu/setup_parts.py seed; done
echo "=== import times (-X importtime, cumulative us, top 25)"
python3 -X importtime -c "import torch, torch._dynamo; import profiler_core.engine.runner" 2> "$w/importtime.txt"
sort -t'|' -k2 -n -r "$w/importtime.txt" | head -25
for n in 1 2; do
  echo "=== default run $n ($(date -u +%T))"
  s=$(date +%s.%N)
  timeout 120 python3 -m profiler_core run --preset seed --out "$w/default-$n" --progress none --timings \
    > "$w/default-$n.txt" 2> "$w/default-$n.err"
  echo "rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
  tail -25 "$w/default-$n.err"
  grep -E "^Speedup|^Predicted" "$w/default-$n.txt"
done
echo "=== cProfile of a default run ($(date -u +%T))"
timeout 120 python3 -m cProfile -o "$w/run.prof" -m profiler_core run --preset seed --out "$w/prof" \
  --progress none > /dev/null 2>&1; echo "rc $?"
python3 -c "import pstats; pstats.Stats('$w/run.prof').sort_stats('cumulative').print_stats(45)" | tail -60 | cut -c1-200
if [ -n "${GPU_TESTS:-}" ]; then
  echo "=== pytest -m gpu $GPU_TESTS ($(date -u +%T))"
  timeout "${PYTEST_TIMEOUT:-380}" python3 -m pytest -m gpu -v -p no:cacheprovider --durations=12 $GPU_TESTS 2>&1 \
    | grep -v "^\[" | tail -60
fi
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/setup_check.log"
rm -rf "$w"/*/trace_* 2>/dev/null
