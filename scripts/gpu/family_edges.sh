#!/usr/bin/env bash
# Issue 42: how the pool maps memory at each family's longest BF16 context on an emulated RTX 4090
# (the last length that fitted in `data/results/h200/2026-11-27-mixtures` and one step past it; a
# bisection only where the first no longer fits),
# every allocation traced (`VRAM_LAB_ALLOC_TRACE`, as `data/results/h200/2026-11-23-pool`); the
# traces are filtered there to their marks, failures, synchronisations and trims (`trims.csv`), the whole trace kept
# gzipped beside them (`trace.csv.gz`).
#   there: carry .gpu/vram-lab.xz .gpu/commit;  bash scripts/gpu/family_edges.sh "$OUT"
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/family-edges}
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
if [ ! -x /tmp/vram-lab ]; then
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
  chmod +x /tmp/vram-lab
fi
cp .gpu/commit "$OUT/commit" 2>/dev/null
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
# model:the length that fitted,the next step (256 tokens on).
for edge in ${EDGES:-qwen3-8b:25600 llama-3.1-8b:26880 mistral-7b:31744 llama-2-7b:15360}; do
  m=${edge%%:*}; fit=${edge#*:}
  start=$SECONDS
  echo "### $(date -u +%H:%M:%S) $m: 16384,$fit,$((fit + 256))" | tee -a "$OUT/progress.txt"
  VRAM_LAB_ALLOC_TRACE=/tmp/t.csv timeout 240 /tmp/vram-lab kv --model "synthetic:$m" --card rtx4090 --sweeps prefill \
    --resolution 256 --precisions bf16 --logits last --lengths "16384,$fit,$((fit + 256))" --quiet --out "$OUT/$m" \
    > "$OUT/$m.stdout.txt" 2>&1
  echo "### $m exit $? after $((SECONDS - start)) s" | tee -a "$OUT/progress.txt"
  grep -v "^alloc\|^free" /tmp/t.csv > "$OUT/$m/trims.csv"
  gzip -c /tmp/t.csv > "$OUT/$m/trace.csv.gz"
  rm -f /tmp/t.csv "$OUT/$m/report.html"
done
