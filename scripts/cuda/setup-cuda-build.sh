#!/usr/bin/env bash
# setup-cuda-build.sh - install a CUDA 13.0 *build* toolchain so that crates
# using candle-core's `cuda` feature (cudarc + candle-kernels) compile and link
# on a machine that has no GPU, no NVIDIA driver and no CUDA toolkit.
#
# Everything comes from NVIDIA's wheels on PyPI, unpacked into $CUDA13_PREFIX
# (default /opt/cuda13) in the usual toolkit layout (bin/ include/ lib/ lib64/
# nvvm/). The only thing PyPI does not ship is libcuda (it belongs to the
# driver), so a link-time stub libcuda.so is generated from cuda.h.
#
# Usage (as root; safe to re-run):
#   bash scripts/cuda/setup-cuda-build.sh
#   source /opt/cuda13/env.sh
#   cargo build --release --features cuda
#
# Why exactly CUDA 13.0: candle-kernels emits PTX at build time, and a driver
# only loads PTX from a CUDA version <= its own. Driver 580 = CUDA 13.0, so
# nvcc must be 13.0.x; cudarc reads `nvcc --version` (or CUDARC_CUDA_VERSION)
# to choose its 13.0 bindings. Override CUDA_COMPUTE_CAP (default 90 = H100).
set -euo pipefail

PREFIX="${CUDA13_PREFIX:-/opt/cuda13}"
COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
# CUDA 13.0.x components (cuBLAS 13.0.x and cuRAND 10.4.0 are the 13.0 releases).
PKGS=(
  nvidia-cuda-nvcc==13.0.88     # nvcc, ptxas, fatbinary, nvlink
  nvidia-nvvm==13.0.88          # cicc + libdevice (nvcc's device front end)
  nvidia-cuda-crt==13.0.88      # include/crt/*
  nvidia-cuda-cccl==13.0.85     # include/cccl (cub, thrust, libcu++)
  nvidia-cuda-runtime==13.0.96  # cuda.h, cuda_runtime.h, libcudart.so.13
  nvidia-cublas==13.0.2.14      # libcublas.so.13, libcublasLt.so.13
  nvidia-curand==10.4.0.35      # libcurand.so.10
  nvidia-cuda-nvrtc==13.0.88    # libnvrtc.so.13
)
STAMP="$PREFIX/.installed-packages"

if [ "$(cat "$STAMP" 2>/dev/null)" != "${PKGS[*]}" ]; then
  command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || {
    apt-get update && apt-get install -y python3-pip; }
  command -v gcc >/dev/null && command -v g++ >/dev/null || {
    apt-get update && apt-get install -y build-essential; }   # nvcc's host compiler

  # Never wipe a directory this script did not create.
  if [ -n "$(ls -A "$PREFIX" 2>/dev/null)" ] && [ ! -e "$PREFIX/.setup-cuda-build" ]; then
    echo "refusing to replace $PREFIX: not empty and not made by this script" >&2; exit 1
  fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # --target keeps file modes (executables) and does not touch any Python env.
  python3 -m pip install --quiet --root-user-action=ignore --no-deps --no-compile --target "$tmp" "${PKGS[@]}"
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  touch "$PREFIX/.setup-cuda-build"   # ownership marker, see above
  cp -a "$tmp/nvidia/cu13/." "$PREFIX/"   # all CUDA 13 wheels share nvidia/cu13/

  cd "$PREFIX/lib"
  # Unversioned names that `-lcudart -lcublas ...` look for at link time.
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 \
            libnvrtc.so.13 libnvvm.so.4; do
    ln -sf "$so" "${so%%.so.*}.so"
  done
  ln -sfn lib "$PREFIX/lib64"

  # Link-time stub for the driver library (soname libcuda.so.1): every cu*
  # name in cuda.h, before and after preprocessing (so the _v2.._v4 variants
  # too), plus the profiler API. Like NVIDIA's own stub, each function returns
  # CUDA_ERROR_STUB_LIBRARY (34). The GPU machine's real libcuda.so.1 is used
  # at run time.
  mkdir -p stubs
  {
    grep -ohE '\bcu[A-Z][A-Za-z0-9_]*' "$PREFIX/include/cuda.h"
    gcc -E -P -I"$PREFIX/include" -x c "$PREFIX/include/cuda.h" | grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\s*\(' | tr -d ' ('
    printf '%s\n' cuProfilerInitialize cuProfilerStart cuProfilerStop
  } | sort -u | sed 's/.*/int &(void) { return 34; }/' > stubs/libcuda-stub.c
  gcc -shared -fPIC -o stubs/libcuda.so -Wl,-soname,libcuda.so.1 stubs/libcuda-stub.c
  rm stubs/libcuda-stub.c

  printf '%s' "${PKGS[*]}" > "$STAMP"
fi

# NCCL for `--features nccl` (several GPUs): the library to link against (soname libnccl.so.2;
# at run time the GPU machine's own, e.g. PyTorch's, is used). Its own stamp: adding it later
# does not reinstall the rest.
NCCL_PKG=nvidia-nccl-cu13==2.27.7
if [ "$(cat "$PREFIX/.installed-nccl" 2>/dev/null)" != "$NCCL_PKG" ]; then
  tmp="$(mktemp -d)"
  python3 -m pip install --quiet --root-user-action=ignore --no-deps --no-compile --target "$tmp" "$NCCL_PKG"
  cp -a "$tmp/nvidia/nccl/lib/libnccl.so.2" "$PREFIX/lib/"
  cp -a "$tmp/nvidia/nccl/include/nccl.h" "$PREFIX/include/"
  ln -sf libnccl.so.2 "$PREFIX/lib/libnccl.so"
  rm -rf "$tmp"
  printf '%s' "$NCCL_PKG" > "$PREFIX/.installed-nccl"
fi

cat > "$PREFIX/env.sh" <<EOF
# source this before \`cargo build --features cuda\`
export CUDA_HOME="$PREFIX"                  # cudarc link search (lib, lib/stubs, lib64)
export PATH="$PREFIX/bin:\$PATH"            # nvcc for cudarc and candle-kernels
export CUDARC_CUDA_VERSION=13000             # cudarc: use CUDA 13.0 bindings
export CUDA_COMPUTE_CAP="\${CUDA_COMPUTE_CAP:-$COMPUTE_CAP}"  # candle-kernels target GPU (no nvidia-smi here)
export LIBRARY_PATH="$PREFIX/lib:$PREFIX/lib/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
EOF

# Smoke test: nvcc runs and reports 13.0.
"$PREFIX/bin/nvcc" --version | grep -q 'release 13\.0,' || { echo "nvcc is not 13.0" >&2; exit 1; }
echo "CUDA 13.0 build toolchain ready in $PREFIX"
echo "Run:  source $PREFIX/env.sh"
cat "$PREFIX/env.sh"
