#!/usr/bin/env bash
# Issue 42's families on one GPU emulating an RTX 4090: per family (Qwen3-8B, Llama-3.1-8B,
# Llama-2-7B, Mistral-7B) the weights measured beside the ledger in BF16 and Q4_K_M (`anatomy`),
# the longest BF16 context bisected beside the ledger's search (`kv`), decode and prefill speed
# beside the ceiling (`bench`); then Qwen3-14B on the 24 GB card under each offload mode, unified
# memory included (`offload`, never more managed memory than the GPU has free).
#   here:  bash scripts/cuda/build-gpu-binary.sh          (FEATURES=nccl keeps an nccl build's cache)
#   there: carry .gpu/vram-lab.xz;  WAIT=560 bash scripts/gpu/families.sh   (again to wait and pack)
# About 12 minutes on an H100: past one call's 10, run.sh keeps the commands going.
set -u
cd "$(dirname "$0")/../.."
specs=()
for m in qwen3-8b llama-3.1-8b llama-2-7b mistral-7b; do
  specs+=(
    "anatomy-$m=anatomy --model synthetic:$m --precisions bf16,q4_k_m --card rtx4090"
    "kv-$m=kv --model synthetic:$m --precisions bf16 --sweeps prefill --logits last --card rtx4090"
    "bench-$m=bench --model synthetic:$m --precisions bf16,q4_k_m"
  )
done
specs+=("offload-qwen3-14b=offload --model synthetic:qwen3-14b --card rtx4090")
TIMEOUT=${TIMEOUT:-300} bash scripts/gpu/run.sh "${specs[@]}"
