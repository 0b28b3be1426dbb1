#!/usr/bin/env bash
# Two 24 GB cards (and a 24 + 16 GB pair) as AutoDL users pair them for a 32B or 72B Q4_K_M:
# `vram-lab plan --cards` pipelines the model as llama.cpp's --split-mode layer places it, per
# precision the longest context and largest batch every card holds, and each card's share. No GPU,
# no download. Usage: bash scripts/cards_cpu.sh OUT_DIR (OUT_DIR must not exist). Keeps each run's
# CSVs, manifest and console; not its report.html.
set -euo pipefail
out=${1:?usage: scripts/cards_cpu.sh OUT_DIR}
[ -e "$out" ] && { echo "$out exists: give a new folder"; exit 1; }
cd "$(dirname "$0")/.."
cargo build --quiet --bin vram-lab
lab=target/debug/vram-lab
mkdir -p "$out"
for model in qwen2.5-32b qwen2.5-72b; do
  for cards in rtx4090,rtx4090 24GiB,16GiB; do
    name=$model-${cards//,/+}
    echo "vram-lab plan --model synthetic:$model --cards $cards" >"$out/$name.cmd"
    "$lab" plan --model "synthetic:$model" --cards "$cards" --quiet --out "$out/$name" >/dev/null
    rm -f "$out/$name/report.html"
  done
done
