#!/usr/bin/env bash
# Issue 30 on a GPU: the shaped GPU tests, the Shapes sample (the transformer, seq_len
# log-normal: about 200 s on a fresh H200, most of it torch.compile's recompilations), and bench
# of a GPT-style own step over a lengths file against a bare loop padding the same way.
# Usage: OUT=dir bash tests/gpu/shapes_check.sh [sample] [tests] [bench]   (all three: about 9
# minutes, more than one device call allows; name the parts to run them in two calls)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/gpu-cache
work=/tmp/shapes-work; rm -rf "$work"; mkdir -p "$work"
parts=${*:-sample tests bench}
want() { [[ " $parts " == *" $1 "* ]]; }
{
if want sample; then
echo "=== shapes sample ($(date -u +%T))"
timeout 280 python3 -m profiler_core run --preset transformer \
  --vary seq_len=lognormal:128:0.6:512 --buckets pow2 --replays 200 --parity-steps 2 \
  --out "$work/transformer-lengths" --progress none 2>&1 | grep -v -e Warning -e _warn_once | tail -30
[ -f "$work/transformer-lengths/manifest.json" ] && tar -czf "$OUT/shapes_sample.tgz" -C "$work" transformer-lengths
fi
if want tests; then
echo "=== shaped GPU tests ($(date -u +%T))"
timeout 200 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_shaped_gpu.py 2>&1 | tail -25
fi
if want bench; then
echo "=== bench, GPT-style own step over lengths ($(date -u +%T))"
python3 -c "import random; r = random.Random(0); print('\n'.join(str(min(512, max(16, int(r.lognormvariate(5.0, 0.6))))) for _ in range(2000)))" > "$work/lengths.txt"
timeout "${BENCH_TIMEOUT:-300}" python3 -m profiler_core bench --workload profiler_core.examples.causal_lm_step:build \
  --workload-arg batch=8 --workload-arg layers=4 --vary "seq_len=file:$work/lengths.txt" \
  --buckets pow2 --rounds "${BENCH_ROUNDS:-3}" --out "$OUT/bench-gpt-lengths" 2>&1 | tr "\r" "\n" | grep -v "^\[" | tail -20
fi
echo "=== done ($(date -u +%T))"
} 2>&1 | tee -a "$OUT/shapes.log"
