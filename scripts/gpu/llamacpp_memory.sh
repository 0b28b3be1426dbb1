#!/usr/bin/env bash
# Issue 44's measured llama.cpp memory on one GPU: every launch of a grid (GRID, default
# scripts/gpu/llamacpp-grid-1.csv) run by llama-completion built with the project's script, its own
# buffer sizes and nvidia-smi's figure for the process recorded (scripts/reference/llama_memory.sh).
# Two device calls on the same warm machine, since the tools and the lab binary together pass the
# 64 MiB one call carries:
#   here:  bash scripts/reference/llama_memory.sh build /tmp/llm .gpu/llama-memory.tar.xz
#          bash scripts/cuda/build-gpu-binary.sh                   # the lab, which writes the GGUFs
#   there: carry .gpu/vram-lab.xz:            STEP=write bash scripts/gpu/llamacpp_memory.sh
#          then carry .gpu/llama-memory.tar.xz: REPORTS=0 WAIT=560 bash scripts/gpu/llamacpp_memory.sh
#          (again to wait and pack)
# TOOLS names another archive of llama-completion and its commit (the tools built together pass
# 64 MiB: pack llama-completion alone). The write runs in a session of its own and the launches
# wait for it, so a write longer than one call goes on into the next.
# `vram-lab check --results DIR` sets every launch beside `estimate --engine llama.cpp`.
set -u
cd "$(dirname "$0")/../.."
GRID=${GRID:-scripts/gpu/llamacpp-grid-1.csv}
TOOLS=${TOOLS:-.gpu/llama-memory.tar.xz}
if [ "${STEP:-run}" = write ]; then
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
  chmod +x /tmp/vram-lab
  # In a session of its own, so a write longer than one call goes on into the next (which waits).
  mkdir -p /tmp/llm
  setsid bash scripts/reference/llama_memory.sh write /tmp/llm /tmp/vram-lab "$GRID" >/tmp/llm/write.log 2>&1 &
  bash scripts/gpu/wait_for.sh /tmp/llm/written "${WAIT:-560}"
  cat /tmp/llm/write.log
  exit 0
fi
# The graph node by node for a few launches: full offload with and without flash attention, a
# quantized cache, partial offloads (GGML_SCHED_DEBUG=2).
DEBUG=${SCHED_DEBUG_CELLS:-1 2 4 23 25 26}
# run.sh finds the lab binary the write step unpacked (its info goes in the results).
bash scripts/gpu/run.sh \
  "llama=sh:SCHED_DEBUG_CELLS='$DEBUG' bash scripts/reference/llama_memory.sh run /tmp/llm \$R/llama-memory $TOOLS $GRID"
