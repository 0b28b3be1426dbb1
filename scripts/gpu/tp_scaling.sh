#!/usr/bin/env bash
# Issue 43's tensor-parallel decode at two and four GPUs of one host, in one call:
#  - 72B BF16 over four and over two (one GPU cannot hold it), 32B and 14B over four and two
#    beside the whole model on one GPU; every rank's step also timed with its sums skipped
#    (`sums_ms_per_token`: where the step's time goes);
#  - 14B over two with NCCL's low-latency protocol only (NCCL_PROTO=LL), beside NCCL's choice;
#  - Q4_K_M pipelines on emulated RTX 4090s: 72B over four, and 32B over two at the longest
#    context `plan --cards rtx4090,rtx4090` predicts.
#   here:  FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz;  WAIT=560 bash scripts/gpu/tp_scaling.sh   (again to wait and pack)
# ONLY="tp72 tp14-g2-ll" runs only those (scripts/gpu/run.sh).
set -u
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
# plan --model synthetic:qwen2.5-32b --cards rtx4090,rtx4090: Q4_K_M's longest context at batch 1.
EDGE_32_4090=${EDGE_32_4090:-26589}
tp() { echo "parallel --model synthetic:qwen2.5-$1 --gpus $2 --layouts tensor ${3:-}"; }
specs=(
  "tp72-g4=$(tp 72b 4 --no-single)"
  "tp72-g2=$(tp 72b 2 --no-single)"
  "tp14-g2=$(tp 14b 2)"
  "tp14-g2-ll=sh:NCCL_PROTO=LL timeout 240 /tmp/vram-lab $(tp 14b 2 --no-single) --quiet --out \$R/tp14-g2-ll"
  "tp14-g4=$(tp 14b 4 --no-single)"
  "tp32-g4=$(tp 32b 4)"
  "tp32-g2=$(tp 32b 2 --no-single)"
  "pp72-4x4090=parallel --model synthetic:qwen2.5-72b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090,rtx4090,rtx4090 --no-single"
  "pp32-4090-edge=parallel --model synthetic:qwen2.5-32b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090 --prompt $((EDGE_32_4090 - 64)) --new-tokens 64 --no-single"
)
REPORTS=0 TIMEOUT=${TIMEOUT:-240} WAIT=${WAIT:-560} bash scripts/gpu/run.sh "${specs[@]}"
