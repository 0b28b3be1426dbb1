#!/usr/bin/env bash
# The families' sizing on a CPU (no GPU, no download): each published config.json alone in a
# folder priced by `estimate`, and the seeds' cases planned — LLaMA-2-70B on one card and split
# over several, Qwen3-14B on an RTX 4090. Usage: bash scripts/families_cpu.sh OUT_DIR
# (OUT_DIR must not exist). Keeps each run's CSVs, manifest and console; not its report.html.
set -euo pipefail
out=${1:?usage: scripts/families_cpu.sh OUT_DIR}
[ -e "$out" ] && { echo "$out exists: give a new folder"; exit 1; }
cd "$(dirname "$0")/.."
cargo build --quiet --bin vram-lab
lab=target/debug/vram-lab
mkdir -p "$out/configs" "$out/runs"
run() { # NAME ARGS...: one lab command into runs/NAME, its command line kept beside it
  local name=$1; shift
  echo "vram-lab $*" >"$out/runs/$name.cmd"
  "$lab" "$@" --quiet --out "$out/runs/$name" >/dev/null
  rm -f "$out/runs/$name/report.html"
}
for preset in qwen3-8b qwen3-14b llama-2-7b llama-3.1-8b llama-2-70b mistral-7b qwen3-30b-a3b mixtral-8x7b; do
  mkdir -p "$out/configs/$preset"
  cp "data/models/$preset.json" "$out/configs/$preset/config.json"
  run "estimate-$preset" estimate --device cpu --model "$out/configs/$preset" --precisions bf16,q4_k_m --card rtx4090
done
for card in rtx4090 a100-80g h100; do
  run "plan-llama-2-70b-$card" plan --device cpu --model synthetic:llama-2-70b --card "$card"
done
run estimate-llama-2-70b-q4_k_m-pp2-rtx4090 estimate --device cpu --model synthetic:llama-2-70b --precisions q4_k_m --pp 2 --card rtx4090
run estimate-llama-2-70b-bf16-tp8-rtx4090 estimate --device cpu --model synthetic:llama-2-70b --precisions bf16 --tp 8 --card rtx4090
run plan-qwen3-14b-rtx4090 plan --device cpu --model synthetic:qwen3-14b --card rtx4090
git rev-parse --short HEAD >"$out/commit"
echo "wrote $out"
