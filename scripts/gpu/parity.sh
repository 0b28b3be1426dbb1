#!/usr/bin/env bash
# The logits of each build carried (.gpu/vram-lab.xz: 9.0; .gpu/vram-lab-89.xz: compute-8.9 PTX)
# beside the same weights in F32 on the CPU (`vram-lab parity`), one after the other on this GPU.
#   there: bash scripts/gpu/parity.sh "$OUT"
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/parity}
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for cap in 90 89; do
  suffix=$([ $cap = 90 ] && echo "" || echo "-$cap")
  [ -f ".gpu/vram-lab$suffix.xz" ] || continue
  bin=/tmp/vram-lab$suffix
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" ".gpu/vram-lab$suffix.xz" "$bin"
  chmod +x "$bin"
  start=$(date +%s)
  "$bin" parity --model synthetic:qwen2.5-0.5b --json > "$OUT/parity-$cap.json" 2> "$OUT/parity-$cap.err"
  echo "parity $cap exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
done
