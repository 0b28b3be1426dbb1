#!/usr/bin/env bash
# Issue 43's tensor-parallel decode with the small sums over peer memory (`kernels::peer_sum`),
# beside the same runs with NCCL for every sum (VRAM_LAB_PEER_SUM=0), in one call on two GPUs:
#  - the sums' test: every GPU a rank, 300 sums each beside the CPU's (tests/gpu_parallel.rs);
#  - 7B F32 over two: the ranks' tokens beside one GPU's;
#  - 14B and 32B BF16 over two beside one GPU, peer sum and NCCL (14B's peer sum twice).
# GPUS=4 on a four-GPU host instead: the sums' test over four, 72B BF16 over four and over two with
# the peer sum, and over four with NCCL.
#   here:  FEATURES=nccl TESTS=gpu_parallel bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/;  WAIT=560 bash scripts/gpu/peer_sum.sh   (again to wait and pack)
set -u
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
tp() { echo "parallel --model synthetic:qwen2.5-$1 --gpus $2 --layouts tensor ${3:-}"; }
nccl() { echo "sh:VRAM_LAB_PEER_SUM=0 timeout 240 /tmp/vram-lab $(tp "$1" "$2" --no-single) --quiet --out \$R/$3"; }
four=(
  "sums-test=sh:bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz sums_across_gpus"
  "tp72-g4=$(tp 72b 4 --no-single)"
  "tp72-g2=$(tp 72b 2 --no-single)"
  "tp72-g4-nccl=$(nccl 72b 4 tp72-g4-nccl)"
)
specs=(
  "sums-test=sh:bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz sums_across_gpus"
  "tp7f32-g2=$(tp 7b 2 '--precision f32')"
  "tp14-g2=$(tp 14b 2)"
  "tp14-g2-nccl=$(nccl 14b 2 tp14-g2-nccl)"
  "tp14-g2-again=$(tp 14b 2 --no-single)"
  "tp32-g2=$(tp 32b 2)"
  "tp32-g2-nccl=$(nccl 32b 2 tp32-g2-nccl)"
)
[ "${GPUS:-2}" = 4 ] && specs=("${four[@]}")
REPORTS=0 TIMEOUT=${TIMEOUT:-240} WAIT=${WAIT:-560} bash scripts/gpu/run.sh "${specs[@]}"
