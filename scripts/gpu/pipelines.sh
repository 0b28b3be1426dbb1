#!/usr/bin/env bash
# Issue 43's quantized pipelines on two GPUs of one host, placed as llama.cpp's --split-mode layer
# places them (the token embedding in host memory, the output layer on the last slot's GPU): per
# GPU the weights, KV cache and generation peak beside the ledger (`estimate::parallel::
# pipeline_llamacpp`), the greedy tokens beside the whole model on one GPU.
#   here:  FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz;  REPORTS=0 WAIT=560 bash scripts/gpu/pipelines.sh   (again to wait and pack)
set -u
cd "$(dirname "$0")/../.."
TIMEOUT=${TIMEOUT:-420} bash scripts/gpu/run.sh \
  "pipeline-32b-q4km=parallel --model synthetic:qwen2.5-32b --precision q4_k_m --gpus 2 --layouts pipeline" \
  "pipeline-72b-q4km=parallel --model synthetic:qwen2.5-72b --precision q4_k_m --gpus 2 --layouts pipeline" \
  "pipeline-72b-q4km-3-2=parallel --model synthetic:qwen2.5-72b --precision q4_k_m --gpus 2 --layouts pipeline --split 3,2 --no-single" \
  "pipeline-32b-q4km-f32=parallel --model synthetic:qwen2.5-32b --precision q4_k_m-f32 --gpus 2 --layouts pipeline" \
  "pipeline-7b-bf16-split=parallel --model synthetic:qwen2.5-7b --precision bf16 --gpus 2 --layouts pipeline --split 1,1"
