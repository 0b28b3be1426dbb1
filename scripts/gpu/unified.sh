#!/usr/bin/env bash
# Issue 42's unified-memory case: Qwen3-14B in BF16 (27.5 GiB of weights) on one GPU emulating an
# RTX 4090, every offload mode beside its ceiling. managed-split runs on the card: the layers the
# 20 GiB budget holds in device memory, the rest in managed memory preferred on the host, read by
# the GPU through the mapping. A managed block the card cannot hold (the whole model) runs on the
# whole GPU, never asking for more managed memory than it has free; the card's figure for those
# modes is predicted from those runs (`offload_predict.csv`).
#   here:  bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz;  bash scripts/gpu/unified.sh   (again to wait and pack)
# The first call (one run of every mode, 32 tokens each) stopped at its 480 s limit in read-mostly.
set -u
cd "$(dirname "$0")/../.."
# Two runs, so each writes its tables within the per-command limit: the modes on the card, then the
# whole-model managed modes (with managed-split again, for the prediction's remote-read rate).
common="offload --model synthetic:qwen3-14b --card rtx4090 --gpu-budget 20GiB --new-tokens 16 --predict-model qwen3-14b"
TIMEOUT=${TIMEOUT:-420} bash scripts/gpu/run.sh \
  "offload-qwen3-14b-card=$common --modes full,split,streamed,hybrid,managed-split" \
  "offload-qwen3-14b-managed=$common --modes managed-split,managed,managed-prefer-cpu,managed-read-mostly"
