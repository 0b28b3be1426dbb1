#!/usr/bin/env bash
# Times the fused attention and cuBLAS's products of a long prefill with Nsight Compute (BF16, the
# `own` variant, `bench --prompt-lens $LEN`): only kernels whose names match KERNELS are taken (the
# synthetic weights' generation before them is not), LAUNCHES of them. Caches and clocks as they
# run. ncu_sum.py groups them by name and grid: the 32k prefill's rows are those with the largest
# grids; the rest of its time (norms, rotary, the cache's writes) is the bench's whole minus these.
# KERNELS=. SKIP=1000 LAUNCHES=2500 takes every kernel past the weights' generation: then
# `ncu_sum.py ncu.csv --layers` gives one prefill's layers, the rest included.
#   OUT=dir bash scripts/gpu/profile-prefill.sh     then: python3 scripts/gpu/ncu_sum.py dir/ncu.csv
set -u
OUT=${OUT:-/tmp/profile-prefill}
mkdir -p "$OUT"
BIN=${BIN:-/tmp/vram-lab}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
"$NCU" --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none --launch-count "${LAUNCHES:-1200}" \
  --kernel-name "regex:${KERNELS:-flash|gemm|nvjet|cutlass|xmma}" ${SKIP:+--launch-skip $SKIP} \
  "$BIN" bench --precisions bf16 --variants own --prompt-lens "${LEN:-32768}" --new-tokens 1 --repeats 1 --quiet --out "$OUT/bench-$$" \
  > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?"
