#!/usr/bin/env bash
# GPU runs in one device call: `bash scripts/gpu/run.sh PART` with PART = stage1 | kv-bf16 | kv-q4.
# Expects .gpu/vram-lab.xz (the stripped `--features cuda` release binary) and .gpu/gpu-env.sh;
# writes $OUT/results-PART.tar.gz with one folder per run (CSVs, env.json, console.txt), the
# stdout of each, nvidia-smi and a log.
set -u
PART=${1:?stage1 | kv-bf16 | kv-q4}
R=/tmp/results-$PART
mkdir -p "$R"
exec > >(tee "$R/log.txt") 2>&1
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
chmod +x /tmp/vram-lab
source .gpu/gpu-env.sh
VL=/tmp/vram-lab
nvidia-smi > "$R/nvidia-smi.txt" 2>&1
date -u +%Y-%m-%dT%H:%M:%SZ > "$R/date.txt"

run() {  # run NAME SECONDS ARGS...: one vram-lab command, its own output folder
  local name=$1 limit=$2; shift 2
  echo "### $name: vram-lab $* --quiet --out $name"
  local t0=$SECONDS
  timeout "$limit" "$VL" "$@" --quiet --out "$R/$name" > "$R/$name.stdout.txt" 2>&1
  echo "### $name exit $? after $((SECONDS - t0)) s" | tee -a "$R/$name.stdout.txt"
  grep -v '^prefill\|^decode (' "$R/$name.stdout.txt" | tail -n 25
}

M=synthetic:qwen2.5-7b
case $PART in
  stage1)
    "$VL" info --quiet > "$R/info.txt" 2>&1
    run anatomy-rtx4090 300 anatomy --model $M --card rtx4090
    run anatomy-f32-nocard 200 anatomy --model $M --precisions f32
    python3 scripts/make_hf_fixture.py "$R/hf-tiny-qwen2" > "$R/hf-fixture.log" 2>&1; tail -c 300 "$R/hf-fixture.log"
    for dev in cuda cpu; do
      "$VL" generate --device $dev --model "$R/hf-tiny-qwen2" --precision f32 \
        --prompt "显存管理是高性能计算的核心, and the KV cache grows with every token." \
        --max-new-tokens 24 --json > "$R/generate-hf-tiny-$dev.json" 2>&1
      cat "$R/generate-hf-tiny-$dev.json"; echo
    done
    ;;
  kv-bf16)
    run kv-bf16-all-rtx4090 300 kv --model $M --card rtx4090 --precision bf16 --logits all --sweep all
    run kv-bf16-last-rtx4090 240 kv --model $M --card rtx4090 --precision bf16 --logits last --sweep prefill
    run kv-bf16-naive-rtx4090 120 kv --model $M --card rtx4090 --precision bf16 --logits all --sweep prefill --attention naive
    ;;
  kv-q4)
    run kv-q4-all-rtx4090 300 kv --model $M --card rtx4090 --precision q4 --logits all --sweep all
    run kv-q4-last-rtx4090 240 kv --model $M --card rtx4090 --precision q4 --logits last --sweep prefill
    ;;
esac
tar czf "$OUT/results-$PART.tar.gz" -C /tmp "results-$PART"
ls -la "$OUT"
