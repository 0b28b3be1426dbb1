#!/usr/bin/env bash
# Builds the `--features cuda` release binary on a machine without a GPU (after setup-cuda-build.sh)
# and packs it, stripped and xz-compressed (-9e), into .gpu/vram-lab.xz for scripts/gpu/run.sh.
#   bash scripts/cuda/build-gpu-binary.sh            # CUDA_COMPUTE_CAP=90: H100 / H200
#   CUDA_COMPUTE_CAP=89 bash scripts/cuda/build-gpu-binary.sh   # RTX 4090 (86: RTX 3090, A4000)
#   FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh          # several GPUs (needs libnccl.so.2 there)
#   SUFFIX=-89 ...     packs .gpu/vram-lab-89.xz instead (CARGO_TARGET_DIR keeps two builds apart)
#   TESTS="gpu_kernels" ...   also packs those GPU test binaries as .gpu/gpu_kernels$SUFFIX.xz
set -euo pipefail
cd "$(dirname "$0")/../.."
# env.sh sets CUDA_COMPUTE_CAP=90 unless it is set already.
source /opt/cuda13/env.sh
echo "CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP"
target=${CARGO_TARGET_DIR:-target}
suffix=${SUFFIX:-}
# candle's statically linked kernels (its GGUF MMQ/MMVQ products, libmoe.a) are compiled as
# `-gencode=arch=compute_CC,code=sm_CC`: machine code for that card alone. Below 9.0 the PTX is
# embedded beside it too, so that the H100/H200 the tests run on can JIT what an RTX 4090 runs
# (without it the 8.9 build's quantized prefill launched nothing there and read back NaN). Cargo
# does not see NVCC_APPEND_FLAGS, so candle-kernels is rebuilt when they change.
if [ "$CUDA_COMPUTE_CAP" -lt 90 ]; then
  export NVCC_APPEND_FLAGS="-gencode=arch=compute_$CUDA_COMPUTE_CAP,code=compute_$CUDA_COMPUTE_CAP"
fi
stamp="$target/release/.nvcc-append-flags"
if [ "$(cat "$stamp" 2>/dev/null)" != "${NVCC_APPEND_FLAGS:-}" ]; then
  cargo clean --release -p candle-kernels
  mkdir -p "$target/release"
  echo "${NVCC_APPEND_FLAGS:-}" > "$stamp"
fi
cargo build --release --features "${FEATURES:-cuda}"
mkdir -p .gpu
# The commit the notebooks' first output names (the GPU machine's copy has no git).
git rev-parse --short HEAD > .gpu/commit 2>/dev/null || echo unknown > .gpu/commit
# -9e: the repository and the binaries travel together under a 64 MiB limit.
xz -T0 -9e -c "$target/release/vram-lab" > ".gpu/vram-lab$suffix.xz"
for t in ${TESTS:-}; do
  exe=$(cargo test --release --features "${FEATURES:-cuda}" --test "$t" --no-run --message-format=json 2>/dev/null |
    python3 -c "import json,sys; print([m['executable'] for m in map(json.loads, sys.stdin) if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] == sys.argv[1]][-1])" "$t")
  xz -T0 -9e -c "$exe" > ".gpu/$t$suffix.xz"
done
ls -la .gpu/
