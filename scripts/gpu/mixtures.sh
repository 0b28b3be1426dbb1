#!/usr/bin/env bash
# Issue 42's second GPU run, one GPU emulating an RTX 4090 where a card is named:
# - the four families' longest BF16 context again (`kv`), synthetic weights now copied up from the
#   host one tensor at a time as a checkpoint loads, and Llama-2-7B's load (`anatomy`);
# - a mixture of experts computed: Qwen3-30B-A3B in Q4_K_M on the 24 GB card (weights, decode
#   beside the ceiling of its active experts, the longest context beside the ledger's search), and
#   in BF16 on the whole GPU (weights; prefill peaks beside the ledger at three lengths);
# - Llama-2-7b in F16 as the OOM article runs it: the three causes of growing memory (`leaks`).
#   here:  FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz;  REPORTS=0 WAIT=560 bash scripts/gpu/mixtures.sh   (again to wait and pack)
set -u
cd "$(dirname "$0")/../.."
specs=("anatomy-llama-2-7b=anatomy --model synthetic:llama-2-7b --precisions bf16 --card rtx4090")
for m in llama-2-7b qwen3-8b llama-3.1-8b mistral-7b; do
  specs+=("kv-$m=kv --model synthetic:$m --precisions bf16 --sweeps prefill --logits last --card rtx4090")
done
specs+=(
  "anatomy-qwen3-30b-a3b=anatomy --model synthetic:qwen3-30b-a3b --precisions q4_k_m --card rtx4090"
  "kv-qwen3-30b-a3b=kv --model synthetic:qwen3-30b-a3b --precisions q4_k_m --sweeps prefill --logits last --card rtx4090"
  "kv-qwen3-30b-a3b-bf16=kv --model synthetic:qwen3-30b-a3b --precisions bf16 --sweeps prefill --logits last --lengths 1024,4096,16384 --card none"
  "leaks-llama-2-7b=leaks --model synthetic:llama-2-7b --precision f16 --card rtx4090"
)
TIMEOUT=${TIMEOUT:-300} bash scripts/gpu/run.sh "${specs[@]}"
