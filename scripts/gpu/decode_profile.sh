#!/usr/bin/env bash
# Where one decoding step's time goes on the GPU: Nsight Compute over `vram-lab generate` (7B BF16,
# a 160-id prompt, 4 tokens), every node of the captured step profiled on its own (time and DRAM
# bytes read). ncu serializes the kernels, flushes the caches before each and runs at base clocks
# (its defaults): the shares between kernels hold, not the free-running times.
#   there: carry .gpu/vram-lab.xz;  bash scripts/gpu/decode_profile.sh "$OUT"
#   here:  python3 scripts/gpu/ncu_step.py OUT/ncu.csv
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/decode-profile}
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
chmod +x /tmp/vram-lab
ids=$(python3 -c "print(','.join(str(7 + (i * 37) % 5000) for i in range(160)))")
timeout 420 ncu --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
  --log-file "$OUT/ncu.csv" /tmp/vram-lab generate --model synthetic:qwen2.5-7b --precision bf16 \
  --prompt-ids "$ids" --max-new-tokens 4 --json --quiet >"$OUT/gen.json" 2>"$OUT/gen.err"
echo "exit $?"
