#!/usr/bin/env bash
# Builds the `--features cuda` release binary on a machine without a GPU (after setup-cuda-build.sh)
# and packs it, stripped and xz-compressed (-9e), into .gpu/vram-lab.xz for scripts/gpu/run.sh.
#   bash scripts/cuda/build-gpu-binary.sh            # CUDA_COMPUTE_CAP=90: H100 / H200
#   CUDA_COMPUTE_CAP=89 bash scripts/cuda/build-gpu-binary.sh   # RTX 4090 (86: RTX 3090, A4000)
#   FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh          # several GPUs (needs libnccl.so.2 there)
set -euo pipefail
cd "$(dirname "$0")/../.."
source /opt/cuda13/env.sh
cargo build --release --features "${FEATURES:-cuda}"
mkdir -p .gpu
# The commit the notebooks' first output names (the GPU machine's copy has no git).
git rev-parse --short HEAD > .gpu/commit 2>/dev/null || echo unknown > .gpu/commit
# -9e: the repository and the binaries travel together under a 64 MiB limit.
xz -T0 -9e -c target/release/vram-lab > .gpu/vram-lab.xz
ls -la .gpu/vram-lab.xz
