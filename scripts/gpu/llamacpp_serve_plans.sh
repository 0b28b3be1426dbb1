#!/usr/bin/env bash
# The launches issue 44 checks `plan --engine llama.cpp` with: for each model, GGUF type and card
# below, the plan's llama-server flags (f16 and q8_0 caches; a 256 MiB margin), one CSV row each:
#   preset,type,card,card_mib,ctx,ngl,ctk,ctv,batch,ubatch,predicted_mib,ncmoe
# Run here (no GPU): bash scripts/gpu/llamacpp_serve_plans.sh > PLANS.csv
# Then there: scripts/reference/llama_memory.sh serve WORK OUT BIN.tar.xz PLANS.csv
set -euo pipefail
cd "$(dirname "$0")/../.."
LAB=${LAB:-target/debug/vram-lab}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "preset,type,card,card_mib,ctx,ngl,ctk,ctv,batch,ubatch,predicted_mib,ncmoe"
# model type card --seq
while read -r preset type card seq; do
  out=$tmp/$preset-$type-$card-$seq
  "$LAB" plan --engine llama.cpp --model "synthetic:$preset" --gguf-types "$type" --card "$card" --seq "$seq" --out "$out" --quiet >/dev/null
  tail -n +2 "$out/plan/plan_llamacpp.csv" | while IFS=, read -r gtype cache ngl ncmoe ctx need card_mib command; do
    [ "$command" = "does not fit" ] && continue
    b=$(echo "$command" | sed -E 's/.* -b ([0-9]+).*/\1/'); ub=$(echo "$command" | sed -E 's/.* -ub ([0-9]+).*/\1/')
    gtype=$(echo "$gtype" | tr "[:upper:]" "[:lower:]")
    echo "$preset,$gtype,$card,$card_mib,$ctx,$ngl,$cache,$cache,$b,$ub,$need,$ncmoe"
  done
done <<CASES
${CASES:-$(cat <<'DEFAULT'
qwen2.5-14b q8_0 a4000 4096
qwen3-8b bf16 a4000 4096
qwen3-8b bf16 rtx4090 4096
qwen2.5-14b q4_k_m rtx4090 4096
qwen2.5-14b q4_k_m a4000 4096
qwen2.5-14b q8_0 rtx4090 4096
qwen3-8b q4_k_m rtx4090 4096
qwen3-8b q4_k_m a4000 4096
qwen2.5-7b q4_k_m a4000 4096
qwen2.5-7b q4_k_m rtx4090 4096
DEFAULT
)}
CASES
