#!/usr/bin/env bash
# Times every kernel of one long prefill with Nsight Compute (BF16, the `own` variant, the
# warm-up prefill of `bench --prompt-lens $LEN`): where the time goes between the fused attention,
# cuBLAS's products and the rest. Caches and clocks as they run. The launches taken (LAUNCHES,
# default 700) cover the warm-up prefill of 7B's 28 layers and stop before the timed ones.
#   OUT=dir bash scripts/gpu/profile-prefill.sh     then: python3 scripts/gpu/ncu_sum.py dir/ncu.csv
set -u
OUT=${OUT:-/tmp/profile-prefill}
mkdir -p "$OUT"
BIN=${BIN:-/tmp/vram-lab}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
"$NCU" --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none --launch-count "${LAUNCHES:-700}" \
  "$BIN" bench --precisions bf16 --variants own --prompt-lens "${LEN:-32768}" --new-tokens 1 --repeats 1 --quiet --out "$OUT/bench-$$" \
  > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?"
