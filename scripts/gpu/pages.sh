#!/usr/bin/env bash
# Issue 42: the longest context on an emulated RTX 4090 under the lab's page allocator
# (`--allocator pages`, 2 MiB pages mapped where live tensors lie) beside candle's pool, for the
# five families, in one call: each `kv` bisection (step 256) as `data/results/h200/2026-11-27-mixtures`
# ran it, once per allocator; then the prefill's speed under each (`bench`), so the pages cost no time.
#   there: carry .gpu/vram-lab.xz .gpu/commit;  bash scripts/gpu/pages.sh "$OUT"
#   MODELS (default the five), PRECISIONS (bf16), ALLOCATORS (pages pool), EDGES, STAGES, ONLY (smoke kv edges stages bench)
set -u
cd "$(dirname "$0")/../.."
RES=$(realpath -m "${1:-/tmp/pages}")
mkdir -p "$RES"
source scripts/cuda/gpu-env.sh
source scripts/gpu/common.sh
LAB=/tmp/vram-lab
[ -x $LAB ] || unpack .gpu/vram-lab.xz $LAB
cp .gpu/commit "$RES/commit" 2>/dev/null
nvidia-smi > "$RES/nvidia-smi.txt" 2>&1
MODELS=${MODELS:-qwen2.5-7b qwen3-8b llama-3.1-8b mistral-7b llama-2-7b}
# A small model first: a page allocator that cannot serve shows here in seconds.
if want smoke; then
  run smoke-pages $LAB kv --model synthetic:qwen2.5-0.5b --allocator pages --precisions bf16 --sweeps prefill,decode \
    --logits last --lengths 1024,4096 --decode-to 256 --card rtx4090 --quiet --out "$RES/smoke-pages"
fi
if want kv; then
  for m in $MODELS; do
    for p in ${PRECISIONS:-bf16}; do
      for a in ${ALLOCATORS:-pages pool}; do
        run "kv-$m-$p-$a" timeout 300 $LAB kv --model "synthetic:$m" --allocator "$a" --precisions "$p" --sweeps prefill \
          --logits last --card rtx4090 --quiet --out "$RES/kv-$m-$p-$a"
      done
    done
  done
fi
# Q4_K_M near the edge (a full bisection from 1,024 runs minutes at these lengths): EDGES lists
# model:length, the ledger's search under the pages on the doubling grid; each runs that length
# and the next two steps, bisecting only where they do not bracket the edge.
if want edges; then
  for e in ${EDGES:-}; do
    m=${e%%:*}; n=${e#*:}
    run "kv-$m-q4_k_m-pages" timeout 170 $LAB kv --model "synthetic:$m" --allocator pages --precisions q4_k_m \
      --sweeps prefill --logits last --lengths "$n,$((n + 256)),$((n + 512))" --card rtx4090 --quiet \
      --out "$RES/kv-$m-q4_k_m-pages"
  done
fi
# The other single-GPU stages under the pages, small models, each bounded: that they run (the
# offload streamer's second stream, the leak hunt's trims, the allocator stage's own pool).
if want stages; then
  STAGES=${STAGES:-anatomy leaks offload frag train}
  for st in "anatomy --model synthetic:qwen2.5-1.5b --card rtx4090" "leaks --model synthetic:qwen2.5-0.5b --card rtx4090" \
    "offload --model synthetic:qwen2.5-1.5b" "frag --card rtx4090" "train --model synthetic:qwen2.5-0.5b --seq 256 --steps 2"; do
    [[ " $STAGES " == *" ${st%% *} "* ]] || continue
    name=stage-${st%% *}
    run "$name" timeout "${STAGE_TIMEOUT:-60}" $LAB $st --allocator pages --quiet --out "$RES/$name"
  done
fi
if want bench; then
  for a in pool pages; do
    run "bench-$a" timeout 300 $LAB bench --model synthetic:qwen2.5-7b --allocator "$a" --precisions bf16 --card none --prompt-lens 512,4096,16384 --new-tokens 128 \
      --quiet --out "$RES/bench-$a"
  done
fi
find "$RES" -name report.html -delete
log done
