#!/usr/bin/env bash
# Issue 21's GPU checks: the gpu-marked DDP tests (NCCL with one rank; the two-GPU acceptance
# runs where two GPUs are visible), a `run --nproc-per-node 1` on the GPU with every mode, and the
# tool against a hand-written torchrun loop in alternating fresh launches.
# Usage: OUT=dir bash tests/gpu/ddp_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; w=$OUT/ddp; mkdir -p "$w"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
nproc=$(( gpus >= 2 ? 2 : 1 ))
{
echo "GPUs: $gpus; $(python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())')"
echo "=== gpu-marked DDP tests ($(date -u +%T))"
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_ddp_gpu.py -rA 2>&1 | tail -30
echo "=== run --nproc-per-node 1 ($(date -u +%T))"
python3 -m profiler_core run --preset custom --batch 64 --d-in 512 --hidden 512 --d-out 256 \
  --hidden-layers 4 --modes eager,graph,graphed_callables,compile_ro --nproc-per-node 1 \
  --out "$w/one-rank" --progress none > "$w/one-rank.log" 2>&1
echo "rc $?"; tail -25 "$w/one-rank.log"
echo "=== tool vs bare torchrun loop, $nproc rank(s) ($(date -u +%T))"
python3 tests/gpu/ddp_bench.py --nproc "$nproc" --rounds 3 --out "$w/bench" 2>&1 | tail -20
echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$OUT/ddp_check.txt"
