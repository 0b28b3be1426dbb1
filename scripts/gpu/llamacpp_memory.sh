#!/usr/bin/env bash
# Issue 44's measured llama.cpp memory: one GPU, every launch of a grid (GRID, default
# scripts/gpu/llamacpp-grid-1.csv) run by llama-completion built with the project's script, its own
# buffer sizes and nvidia-smi's figure for the process recorded (scripts/reference/llama_memory.sh).
#   here:  bash scripts/reference/llama_memory.sh build /tmp/llm .gpu/llama-memory.tar.xz
#          (the lab binary: bash scripts/cuda/build-gpu-binary.sh; it writes the GGUFs there)
#   there: carry .gpu/vram-lab.xz, .gpu/llama-memory.tar.xz;
#          REPORTS=0 WAIT=560 bash scripts/gpu/llamacpp_memory.sh   (again to wait and pack)
# `vram-lab check --llama-cpp DIR/llama-memory` compares every launch with `estimate --engine llama.cpp`.
set -u
cd "$(dirname "$0")/../.."
GRID=${GRID:-scripts/gpu/llamacpp-grid-1.csv}
# The graph node by node for a few launches: full offload with and without flash attention, a
# quantized cache, a partial offload (GGML_SCHED_DEBUG=2).
DEBUG=${SCHED_DEBUG_CELLS:-1 2 4 23 25 26}
bash scripts/gpu/run.sh \
  "llama=sh:SCHED_DEBUG_CELLS='$DEBUG' bash scripts/reference/llama_memory.sh run /tmp/llm \$R/llama-memory /tmp/vram-lab .gpu/llama-memory.tar.xz $GRID"
