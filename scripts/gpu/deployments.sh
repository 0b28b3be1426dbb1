#!/usr/bin/env bash
# Issue 43's deployments on two GPUs of one host, in one call:
#  - tensor-parallel decode (each rank's step captured as one CUDA graph, NCCL's sums inside) beside
#    the whole model on one GPU: 7B, 14B, 32B in BF16, 7B in F32 (tokens without BF16's rounding);
#  - Q4_K_M pipelines placed as llama.cpp places them, each GPU emulating a user's card: two RTX
#    4090s (32B and 72B, at 160 tokens and at the longest context `plan --cards` predicts, then
#    past it) and 24 GiB + 16 GiB (32B), each GPU's weights, KV and peak beside the ledger.
# The lengths come from `plan --cards` on the build machine (EDGE_* below, each with the plan's
# command); a run at the edge must fit and one past it must not.
#   here:  FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz;  WAIT=560 bash scripts/gpu/deployments.sh   (again to wait and pack)
# ONLY="tp14 pp72-4090-edge" runs only those (scripts/gpu/run.sh). The committed runs' RUN.md
# names the version of this script each call ran.
set -u
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
# plan --model synthetic:qwen2.5-72b --cards rtx4090,rtx4090: Q4_K_M's longest context at batch 1.
EDGE_72_4090=${EDGE_72_4090:-1277}
# plan --model synthetic:qwen2.5-32b --cards rtx4090,rtx4090
EDGE_32_4090=${EDGE_32_4090:-26589}
# plan --model synthetic:qwen2.5-32b --cards 24GiB,16GiB
EDGE_32_24_16=${EDGE_32_24_16:-16308}
# Prompt and decoded tokens fill the context: the prompt is the edge less the 64 decoded.
pp() { echo "parallel --model synthetic:qwen2.5-$1 --precision q4_k_m --layouts pipeline --cards $2 --prompt $(($3 - 64)) --new-tokens 64 ${4:-}"; }
specs=(
  "tp14=parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts tensor"
  "tp32=parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts tensor"
  "tp7f32=parallel --model synthetic:qwen2.5-7b --precision f32 --gpus 2 --layouts tensor"
  "tp7=parallel --model synthetic:qwen2.5-7b --gpus 2 --layouts tensor"
  "pp32-4090=parallel --model synthetic:qwen2.5-32b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090"
  "pp32f32-4090=parallel --model synthetic:qwen2.5-32b --precision q4_k_m-f32 --layouts pipeline --cards rtx4090,rtx4090"
  "pp72-4090=parallel --model synthetic:qwen2.5-72b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090"
  "pp32-24-16=parallel --model synthetic:qwen2.5-32b --precision q4_k_m --layouts pipeline --cards 24GiB,16GiB"
  "pp72-4090-edge=$(pp 72b rtx4090,rtx4090 "$EDGE_72_4090" --no-single)"
  "pp72-4090-past=$(pp 72b rtx4090,rtx4090 $((EDGE_72_4090 + 256)) --no-single)"
  "pp32-24-16-edge=$(pp 32b 24GiB,16GiB "$EDGE_32_24_16" --no-single)"
  "pp32-24-16-past=$(pp 32b 24GiB,16GiB $((EDGE_32_24_16 + 1024)) --no-single)"
  "pp32-4090-edge=$(pp 32b rtx4090,rtx4090 "$EDGE_32_4090" --no-single)"
)
REPORTS=0 TIMEOUT=${TIMEOUT:-240} WAIT=${WAIT:-560} bash scripts/gpu/run.sh "${specs[@]}"
