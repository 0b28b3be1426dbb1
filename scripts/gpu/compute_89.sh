#!/usr/bin/env bash
# Issue 45's build for the users' cards on the test GPU: the lab built with CUDA_COMPUTE_CAP=89
# (an RTX 4090: candle's kernels and the lab's own compiled to compute-8.9 PTX, which this card's
# driver compiles for itself; every kernel of the lab checked at load against 8.9's limits) beside
# the 9.0 build: the kernel tests, and greedy tokens (F32, BF16 and Q4_K_M: the lab's decoding kernels
# and, for BF16, its flash-attention prefill) of whichever builds are carried.
#   here:  CUDA_COMPUTE_CAP=89 SUFFIX=-89 CARGO_TARGET_DIR=target/cc89 TESTS=gpu_kernels bash scripts/cuda/build-gpu-binary.sh
#          bash scripts/cuda/build-gpu-binary.sh                                  # .gpu/vram-lab.xz (9.0)
#   there: bash scripts/gpu/compute_89.sh "$OUT"    (one call per binary carried: together they
#          pass the 64 MiB a call carries); python3 scripts/gpu/compare_tokens.py DIR  here.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/compute-89}
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv >"$OUT/gpu.csv" 2>&1
for cap in 90 89; do
  suffix=$([ $cap = 90 ] && echo "" || echo "-$cap")
  if [ -f ".gpu/gpu_kernels$suffix.xz" ]; then
    bash scripts/gpu/test_binary.sh ".gpu/gpu_kernels$suffix.xz" >"$OUT/gpu_kernels-$cap.txt" 2>&1
    echo "gpu_kernels $cap exit $?" | tee -a "$OUT/summary.txt"
  fi
  [ -f ".gpu/vram-lab$suffix.xz" ] || continue
  bin=/tmp/vram-lab$suffix
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" ".gpu/vram-lab$suffix.xz" "$bin"
  chmod +x "$bin"
  # A prompt of 300 ids: the prefill takes the flash-attention kernel (BF16), then 48 greedy steps.
  ids=$(python3 -c "print(','.join(str(7 + (i * 37) % 5000) for i in range(300)))")
  for p in f32 bf16 q4_k_m; do
    "$bin" generate --model synthetic:qwen2.5-0.5b --precision "$p" --prompt-ids "$ids" --max-new-tokens 48 \
      --json --quiet >"$OUT/generate-$p-$cap.json" 2>"$OUT/generate-$p-$cap.err"
    echo "generate $p $cap exit $?" | tee -a "$OUT/summary.txt"
  done
done
