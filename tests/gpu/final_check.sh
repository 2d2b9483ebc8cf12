#!/usr/bin/env bash
# The session's last GPU call: a run of changing shapes for the Shapes sample (the transformer,
# seq_len log-normal) checked as tests/test_shaped_gpu.py checks it, the bundled sample re-recorded
# (seed bf16, every mode), the GPU tests of the run's sequence (round trip), of a data-parallel
# rank and of a GradScaler in an own step, and ResNet-50's parity verdict.
# Usage: OUT=dir bash tests/gpu/final_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/gpu-cache
work=/tmp/final-work; rm -rf "$work"; mkdir -p "$work"
{
echo "=== shapes ($(date -u +%T))"
timeout "${SHAPES_TIMEOUT:-170}" python3 -m profiler_core run --preset transformer \
  --vary seq_len=lognormal:128:0.6:512 --buckets pow2 --replays 200 --parity-steps 2 \
  --out "$work/transformer-lengths" --progress none 2>&1 | tail -40
[ -d "$work/transformer-lengths" ] && tar -czf "$OUT/shapes_sample.tgz" -C "$work" transformer-lengths
timeout 30 python3 - "$work/transformer-lengths" <<'PY'
import sys
from profiler_core.engine import shaped
from profiler_core.storage.results import RunResult
run = RunResult.load(sys.argv[1])
s = run.table("strategies").set_index("strategy")
print(s.to_string())
checks = {
    "buckets beats eager": s.at["buckets", "speedup"] > 1.0,
    "pad_max pads more": s.at["pad_max", "padded_share"] > s.at["buckets", "padded_share"],
    "shared pool <= own pools": s.at["buckets", "pool_bytes"] <= s.at["buckets_own_pools", "pool_bytes"],
    "parity of padded": all(s.at[n, "parity_matches"] == 1.0 for n in shaped.PADDED),
    "prediction within 25%": bool(((s.loc[list(shaped.GRAPHED), "predicted_speedup"]
                                    / s.loc[list(shaped.GRAPHED), "speedup"] - 1).abs() < 0.25).all()),
}
print("predicted/measured:", (s.loc[list(shaped.GRAPHED), "predicted_speedup"]
                              / s.loc[list(shaped.GRAPHED), "speedup"]).round(3).to_dict())
print("CHECKS", checks)
print("NOTES", run.notes)
PY
echo "=== sample ($(date -u +%T))"
timeout "${SAMPLE_TIMEOUT:-110}" python3 -m profiler_core run --preset seed --dtype bf16 \
  --modes eager,graph,graphed_callables,compile,compile_ro --out "$work/sample_run" --progress none \
  | grep -e "^Speedup" -e "^Parity" -e "^numerics" -e "Predicted" \
  ; [ -f "$work/sample_run/manifest.json" ] && tar -czf "$OUT/sample_run.tgz" -C "$work" sample_run
echo "=== gpu tests ($(date -u +%T))"
timeout "${TESTS_TIMEOUT:-100}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_roundtrip.py \
  tests/test_ddp_gpu.py tests/test_own_step_gpu.py::test_a_grad_scaler_inside_the_step_is_named_at_capture \
  2>&1 | tail -6
echo "=== resnet50 b1 ($(date -u +%T))"
timeout 40 python3 -m profiler_core run --workload profiler_core.examples.resnet50_step:build \
  --workload-arg batch=1 --no-nvml --out "$work/r50" --progress none | grep -e "^Speedup" -e "^Parity"
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/final.log"
