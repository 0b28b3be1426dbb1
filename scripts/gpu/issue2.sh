#!/usr/bin/env bash
# Every GPU measurement of stage 1 (issue 2) in one device call. Expects .gpu/vram-lab.xz (the
# stripped `--features cuda` release binary) and .gpu/gpu-env.sh; writes $OUT/results.tar.gz.
set -u
R=/tmp/results
mkdir -p "$R"
exec > >(tee "$R/log.txt") 2>&1
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
chmod +x /tmp/vram-lab
source .gpu/gpu-env.sh
VL=/tmp/vram-lab
nvidia-smi > "$R/nvidia-smi.txt" 2>&1
ldd "$VL" | grep "not found"
date -u +%Y-%m-%dT%H:%M:%SZ > "$R/date.txt"
"$VL" info --quiet > "$R/info.txt" 2>&1; cat "$R/info.txt"

run() {
  local name=$1; shift
  echo "### $name: vram-lab $* --quiet --out $name"
  local t0=$(date +%s.%N)
  "$VL" "$@" --quiet --out "$R/$name" > "$R/$name.stdout.txt" 2>&1
  local rc=$?
  echo "### $name exit $rc after $(echo "$(date +%s.%N) - $t0" | bc) s" | tee -a "$R/$name.stdout.txt"
  tail -n 30 "$R/$name.stdout.txt"
}

M=synthetic:qwen2.5-7b
run anatomy-rtx4090 anatomy --model $M --card rtx4090
run anatomy-f32-nocard anatomy --model $M --precisions f32
run prefill-24gib-all kv --model $M --card 24GiB --lengths 16384,32768 --logits all
run prefill-24gib-last kv --model $M --card 24GiB --lengths 16384,32768 --logits last
run prefill-24gib-naive kv --model $M --card 24GiB --attention naive --lengths 4096,8192,16384 --logits last
run card-too-large anatomy --model synthetic:tiny --card 400GiB

# transformers writes a tiny checkpoint and its greedy tokens; the lab generates from the same files.
python3 scripts/make_hf_fixture.py "$R/hf-tiny-qwen2" > "$R/hf-fixture.log" 2>&1; tail -3 "$R/hf-fixture.log"
for dev in cuda cpu; do
  "$VL" generate --device $dev --model "$R/hf-tiny-qwen2" --precision f32 --prompt "显存管理是高性能计算的核心," \
    --max-new-tokens 24 --json > "$R/generate-hf-tiny-$dev.json" 2>&1
  cat "$R/generate-hf-tiny-$dev.json"
done
tar czf "$OUT/results.tar.gz" -C /tmp results
ls -la "$OUT"
