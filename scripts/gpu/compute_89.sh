#!/usr/bin/env bash
# Issue 45's build for the users' cards on the test GPU: the lab built with CUDA_COMPUTE_CAP=89
# (an RTX 4090: candle's kernels and the lab's own compiled to compute-8.9 PTX, which this card's
# driver compiles for itself; every kernel checked at load against 8.9's limits) beside the 9.0
# build, in one call: the kernel tests of each, and the greedy tokens of each (BF16 and Q4_K_M,
# the lab's decoding kernels and its flash-attention prefill).
#   here:  bash scripts/cuda/build-gpu-binary.sh                         # .gpu/vram-lab.xz (9.0)
#          CUDA_COMPUTE_CAP=89 OUT_NAME=vram-lab-89 bash scripts/cuda/build-gpu-binary.sh
#          and both kernel tests (cargo test --release --features cuda --test gpu_kernels --no-run),
#          packed as .gpu/gpu_kernels.xz and .gpu/gpu_kernels-89.xz
#   there: bash scripts/gpu/compute_89.sh OUT_DIR
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/compute-89}
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
for cap in 90 89; do
  suffix=$([ $cap = 90 ] && echo "" || echo "-$cap")
  bin=/tmp/vram-lab$suffix
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" ".gpu/vram-lab$suffix.xz" "$bin"
  chmod +x "$bin"
  bash scripts/gpu/test_binary.sh ".gpu/gpu_kernels$suffix.xz" >"$OUT/gpu_kernels-$cap.txt" 2>&1
  echo "gpu_kernels $cap exit $?" >>"$OUT/summary.txt"
  for p in bf16 q4_k_m; do
    # A prompt of 300 ids: the prefill takes the flash-attention kernel (BF16), then 48 greedy steps.
    ids=$(python3 -c "print(','.join(str(7 + (i * 37) % 5000) for i in range(300)))")
    "$bin" generate --model synthetic:qwen2.5-0.5b --precision "$p" --prompt-ids "$ids" --max-new-tokens 48 \
      --json --quiet >"$OUT/generate-$p-$cap.json" 2>"$OUT/generate-$p-$cap.err"
    echo "generate $p $cap exit $?" >>"$OUT/summary.txt"
  done
done
for p in bf16 q4_k_m; do
  python3 - "$OUT/generate-$p-90.json" "$OUT/generate-$p-89.json" "$p" >>"$OUT/summary.txt" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ids = lambda j: j.get("ids") or j.get("generated_ids") or j
same = ids(a) == ids(b)
print(f"{sys.argv[3]}: tokens of the 8.9 build {'equal' if same else 'DIFFER from'} the 9.0 build's ({len(ids(a)) if isinstance(ids(a), list) else '?'} ids)")
PY
done
cat "$OUT/summary.txt"
