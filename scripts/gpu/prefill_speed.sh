#!/usr/bin/env bash
# Issue 45 item 1: the BF16 prefill beside PyTorch's in one call on one GPU, under each layout of the
# fused attention's warps (`VRAM_LAB_FLASH`, CONFIGS), the runs interleaved over ROUNDS; then the
# kernel tests and Nsight Compute over the 32k prefill's attention in each layout (its time, and the
# tensor pipes', shared memory's and warps' state). Everything under $RES, packed into
# $OUT/prefill-speed.tar.xz (a call brings back few files).
#   here:  FEATURES=nccl TESTS=gpu_kernels bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz .gpu/gpu_kernels.xz .gpu/commit; bash scripts/gpu/prefill_speed.sh "$OUT"
# CONFIGS="hopper:VRAM_LAB_FLASH=hopper wide:VRAM_LAB_FLASH=wide" (NAME:ENV=VALUE,...; the layouts are
# narrow, wide and hopper); LENS (default 16384,32768); ONLY="kernels torch bench ncu layers" picks
# parts (layers: every kernel of the first config's 32k prefill under ncu, by layer).
# With .gpu/vram-lab-base.xz carried too (an earlier build), each round also runs it as "base".
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/out}
# A fresh folder each run: a machine lent again may keep an earlier call's /tmp, and a folder given
# as RES must be empty (nothing in it is overwritten).
RES=${RES:-$(mktemp -d /tmp/prefill-speed.XXXXXX)}
if [ -n "$(ls -A "$RES" 2>/dev/null)" ]; then echo "RES=$RES is not empty" >&2; exit 2; fi
mkdir -p "$OUT" "$RES"
source scripts/cuda/gpu-env.sh
source scripts/gpu/common.sh
unpack .gpu/vram-lab.xz /tmp/vram-lab
[ -e .gpu/gpu_kernels.xz ] && unpack .gpu/gpu_kernels.xz /tmp/gpu_kernels
[ -e .gpu/vram-lab-base.xz ] && unpack .gpu/vram-lab-base.xz /tmp/vram-lab-base
cp .gpu/commit "$RES/commit" 2>/dev/null
[ -e .gpu/vram-lab-base.xz ] && cp .gpu/base-commit "$RES/base-commit" 2>/dev/null
nvidia-smi > "$RES/nvidia-smi.txt" 2>&1
CONFIGS=${CONFIGS:-hopper:VRAM_LAB_FLASH=hopper wide:VRAM_LAB_FLASH=wide}
LENS=${LENS:-16384,32768}
if want kernels && [ -x /tmp/gpu_kernels ]; then
  run kernels /tmp/gpu_kernels --test-threads=1
fi
if want torch; then
  run torch timeout 400 python3 scripts/reference/pytorch_reference.py bench --prompt-lens "$LENS" --new-tokens 8 --repeats 3 --out "$RES/torch-bench.jsonl"
fi
if want bench; then
  torch_arg=()
  [ -s "$RES/torch-bench.jsonl" ] && torch_arg=(--pytorch "$RES/torch-bench.jsonl")
  BENCH=(bench --precisions bf16 --variants own --prompt-lens "$LENS" --new-tokens 8 --repeats 3 --quiet "${torch_arg[@]}")
  for r in $(seq 1 "${ROUNDS:-2}"); do
    [ -x /tmp/vram-lab-base ] && run "base-$r" timeout 300 /tmp/vram-lab-base "${BENCH[@]}" --out "$RES/base-$r"
    for c in $CONFIGS; do
      name=${c%%:*}; envs=${c#*:}
      run "$name-$r" ${envs//,/ } timeout 300 /tmp/vram-lab "${BENCH[@]}" --out "$RES/$name-$r"
    done
  done
fi
if want ncu; then
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
  BENCH32K=(bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 1 --repeats 1 --quiet)
  for c in $CONFIGS; do
    name=${c%%:*}; envs=${c#*:}
    # Which attention launch is the 32k prefill's 14th layer: the short prefills of the decoding
    # warm-up come first, so the first pass lists every attention's grid and the second takes the
    # first launch of the largest grid, plus 13, with every section this question needs.
    run "ncu-grids-$name" ${envs//,/ } timeout 300 "$NCU" --csv --metrics launch__grid_size --kernel-name regex:flash \
      --launch-count 200 /tmp/vram-lab "${BENCH32K[@]}" --out "$RES/ncu-grids-bench-$name"
    skip=$(python3 - "$RES/ncu-grids-$name.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14 and r[-3] == "launch__grid_size"]
sizes = [float(r[-1].replace(",", "")) for r in rows]
print(sizes.index(max(sizes)) + 13 if sizes else "")
PY
)
    [ -n "$skip" ] || { log "ncu-$name: no attention launch listed"; continue; }
    run "ncu-$name" ${envs//,/ } timeout 300 "$NCU" --csv --page details --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
      --kernel-name regex:flash --launch-skip "$skip" --launch-count 1 --cache-control none --clock-control none \
      /tmp/vram-lab "${BENCH32K[@]}" --out "$RES/ncu-bench-$name"
  done
fi
if want layers; then
  # Every kernel of the first config's 32k prefill timed (profile-prefill.sh), summed by layer.
  c=${CONFIGS%% *}; envs=${c#*:}
  run layers ${envs//,/ } BIN=/tmp/vram-lab KERNELS=. SKIP=1000 LAUNCHES=2500 OUT="$RES/layers" bash scripts/gpu/profile-prefill.sh
  python3 scripts/gpu/ncu_sum.py "$RES/layers/ncu.csv" --layers > "$RES/layers/layers.txt" 2>&1
  xz -9 "$RES/layers/ncu.csv"
fi
# Each bench's report.html (4.5 MB) stays behind: the CSVs hold its figures, and a call brings back
# little.
tar -cJf "$OUT/prefill-speed.tar.xz" --exclude=report.html -C "$(dirname "$RES")" "$(basename "$RES")"
log "packed"
