#!/usr/bin/env bash
# Issue 45: Q4_K_M decode and prefill beside llama.cpp's in one call on one GPU. The lab writes its
# synthetic Qwen2.5-7B as llama.cpp's Q4_K_M GGUF and llama-bench times it (every layer on the GPU,
# flash attention on); then `vram-lab bench` (variant own), reading llama-bench's JSON, runs ROUNDS
# times. Everything is written under $RES and packed into $OUT/q4-speed.tar.xz.
#   here:  FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh
#          bash scripts/reference/llama_quantize.sh pack /tmp/llama.cpp.tar.xz
#          bash scripts/reference/llama_bench.sh build /tmp/llb /tmp/llama.cpp.tar.xz .gpu/llama-bench.xz
#   there: carry .gpu/vram-lab.xz .gpu/llama-bench.xz .gpu/llama-bench.xz.commit .gpu/commit;
#          bash scripts/gpu/q4_speed.sh "$OUT"
# ROUNDS (default 2).
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/out}
# A fresh folder each run: a machine lent again may keep an earlier call's /tmp.
RES=$(mktemp -d /tmp/q4-speed.XXXXXX)
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
source scripts/gpu/common.sh
unpack .gpu/vram-lab.xz /tmp/vram-lab
cp .gpu/commit "$RES/commit" 2>/dev/null
nvidia-smi > "$RES/nvidia-smi.txt" 2>&1
run llama-cpp LLAMA_TYPES=q4_k_m bash scripts/reference/llama_bench.sh run "$RES/llama-work" "$RES/llama-cpp" /tmp/vram-lab .gpu/llama-bench.xz
rm -rf "$RES/llama-work"
for r in $(seq 1 "${ROUNDS:-2}"); do
  run "bench-$r" timeout 300 /tmp/vram-lab bench --precisions q4_k_m --variants own --quiet \
    --llama-cpp "$RES/llama-cpp/llama-bench.jsonl" --out "$RES/bench-$r"
done
log done
find "$RES" -name report.html -delete
tar -C "$(dirname "$RES")" -cJf "$OUT/q4-speed.tar.xz" "$(basename "$RES")"
