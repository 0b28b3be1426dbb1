#!/usr/bin/env bash
# On the GPU machine (no Rust, no network): a Q4_K_M GGUF the lab writes for synthetic Qwen2.5-7B,
# priced from its header, loaded on the GPU as stored (stage 1, emulated RTX 4090), and the shipped
# Qwen2.5 tokenizer generating from text. Results into $OUT (at most 8 files).
#   bash scripts/gpu/gguf_q4km.sh      (expects .gpu/vram-lab.xz from scripts/cuda/build-gpu-binary.sh)
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/gguf-q4km
mkdir -p "$R" "$OUT"
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
chmod +x /tmp/vram-lab
source scripts/cuda/gpu-env.sh
run() { local name=$1; shift; echo "### $(date -u +%H:%M:%S) $name: vram-lab $*"; local t0=$SECONDS; /tmp/vram-lab "$@" > "$R/$name.txt" 2>&1; echo "### $name exit $? in $((SECONDS - t0)) s"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  run info info --quiet
  run quantize quantize --quiet --model synthetic:qwen2.5-7b --type q4_k_m --to /tmp/q4km.gguf
  ls -l /tmp/q4km.gguf
  run estimate estimate --quiet --model /tmp/q4km.gguf --precisions q4 --card rtx4090 --out "$R/estimate"
  run anatomy anatomy --quiet --model /tmp/q4km.gguf --precisions q4 --card rtx4090 --out "$R/anatomy"
  run generate generate --quiet --model synthetic:qwen2.5-7b --prompt "显存管理是高性能计算的核心,显存管理是高性能计算的核心," --max-new-tokens 8 --json
} > "$R/log.txt" 2>&1
cat "$R/log.txt"
tar czf "$OUT/results.tar.gz" -C /tmp gguf-q4km
ls -la "$OUT"
