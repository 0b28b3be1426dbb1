#!/usr/bin/env bash
# Times every kernel of batch-1 decoding steps with Nsight Compute (ncu works on the lent GPUs;
# nsys does not): BF16, the `own` variant. The launches skipped are the warm-up, the prefill and
# the capture; the 1,200 taken cover about three graph replays. Caches and clocks are left as they
# run (no flush, no locked clocks), so the times are the step's, one kernel at a time.
#   OUT=dir bash scripts/gpu/profile-step.sh     then: python3 scripts/gpu/ncu_step.py dir/ncu.csv
# PRECISION (default bf16) picks the weights; for another precision the launches before the steps
# differ in number, so ONLY_LAB=1 profiles the lab's kernels only (from the first: every one of
# them is the decoding step's but the prefill's fused attention) instead of skipping 5,400.
set -u
OUT=${OUT:-/tmp/profile}
mkdir -p "$OUT"
BIN=${BIN:-/tmp/vram-lab}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
PRECISION=${PRECISION:-bf16}
if [ -n "${ONLY_LAB:-}" ]; then pick=(--kernel-name 'regex:vram_lab_(q|gemv|attend|argmax)' --launch-count 900); else pick=(--launch-skip 5400 --launch-count 1200); fi
$NCU --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum --cache-control none --clock-control none \
  "${pick[@]}" \
  "$BIN" bench --precisions "$PRECISION" --variants own --prompt-lens 64 --new-tokens 8 --repeats 1 --quiet --out "$OUT/bench-$$" \
  > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?"
