#!/usr/bin/env bash
# Issue 17 after the start-up fixes (bytecode cache, frozen start-up objects): the tool against a
# bare loop in alternating fresh processes (fidelity: eager too), --repeats, then the dashboard's
# gpu tests with the wheels in .whl (see README). Usage: OUT=dir bash tests/gpu/speed_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME="$OUT/cache"
REPEAT_DTYPES=${REPEAT_DTYPES:-bf16} ROUNDS=${ROUNDS:-6} bash tests/gpu/bench_repeats.sh > /dev/null 2>&1
if [ -d .whl ]; then
  {
  echo "=== dashboard gpu tests ($(date -u +%T))"
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
  PYTHONPATH=/tmp/site timeout "${DASH_TIMEOUT:-240}" python3 -m pytest -m gpu -v -s -p no:cacheprovider \
    --durations=5 tests/test_dashboard.py tests/test_launcher.py::test_gpu_dashboard_run_to_every_view_drawn_cold_then_warm \
    2>&1 | grep -v -e "^\[" -e _warn_once -e UserWarning | tail -40
  echo "=== done ($(date -u +%T))"
  } 2>&1 | tee "$OUT/dashboard.log"
fi
rm -rf "$OUT/cache"
