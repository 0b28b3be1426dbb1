#!/usr/bin/env bash
# docs/accuracy.md's error matrix, measured again: every GPU step of both engines in order, one
# device call each (a call carries at most 64 MiB, so the tools travel in parts; see each script),
# on one warm machine. STEP names the step; each prints what to carry.
#   transformers      PyTorch + transformers, the report's sweep (nothing to carry)
#   llama-write       the GGUFs of both llama.cpp grids and the server plans (carry .gpu/vram-lab.xz)
#   llama-memory-1|2  llama-completion over llamacpp-grid-1.csv / -2.csv (carry .gpu/llama-memory.tar.xz)
#   llama-serve       llama-server with plan --engine llama.cpp's flags (carry .gpu/llama-server.tar.xz)
# Then here: `vram-lab check --results DIR` per folder writes check_llamacpp.csv and
# check_transformers.csv; `cargo test --test accuracy_doc` says whether docs/accuracy.md still holds.
set -u
cd "$(dirname "$0")/../.."
case "${STEP:-}" in
  transformers) exec bash scripts/gpu/transformers_memory.sh ;;
  llama-write)
    for grid in scripts/gpu/llamacpp-grid-1.csv scripts/gpu/llamacpp-grid-2.csv; do
      STEP=write GRID=$grid bash scripts/gpu/llamacpp_memory.sh
    done
    exec env STEP=write bash scripts/gpu/llamacpp_serve.sh ;;
  llama-memory-1) exec env GRID=scripts/gpu/llamacpp-grid-1.csv REPORTS=0 bash scripts/gpu/llamacpp_memory.sh ;;
  llama-memory-2) exec env GRID=scripts/gpu/llamacpp-grid-2.csv REPORTS=0 bash scripts/gpu/llamacpp_memory.sh ;;
  llama-serve) exec env STEP=run bash scripts/gpu/llamacpp_serve.sh ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
