#!/usr/bin/env bash
# Issue 45 item 2: batch-1 BF16 decode beside its read ceiling, the lab's binary of this commit
# beside a base binary (an earlier commit's, `.gpu/vram-lab-base.xz`) and with programmatic
# dependent launch switched off (VRAM_LAB_PDL=0), all in one call on one GPU, runs interleaved so a
# drift of the card's clocks shows; then the kernel tests, and Nsight Compute over one step (the
# kernels' own times, as `decode_profile.sh`).
#   here:  FEATURES=nccl TESTS=gpu_kernels bash scripts/cuda/build-gpu-binary.sh
#          (and the base binary, built the same way at the earlier commit, as .gpu/vram-lab-base.xz)
#   there: carry .gpu/vram-lab.xz .gpu/vram-lab-base.xz .gpu/gpu_kernels.xz .gpu/commit;
#          bash scripts/gpu/decode_speed.sh "$OUT"
# ONLY="bench kernels ncu" picks parts; ROUNDS (default 2) repeats the interleaved benches.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/decode-speed}
mkdir -p "$OUT"
source scripts/cuda/gpu-env.sh
unpack() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unpack .gpu/vram-lab.xz /tmp/vram-lab
[ -e .gpu/vram-lab-base.xz ] && unpack .gpu/vram-lab-base.xz /tmp/vram-lab-base
[ -e .gpu/gpu_kernels.xz ] && unpack .gpu/gpu_kernels.xz /tmp/gpu_kernels
cp .gpu/commit "$OUT/commit" 2>/dev/null
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
/tmp/vram-lab info --quiet > "$OUT/info.txt" 2>&1
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
log() { echo "### $(date -u +%H:%M:%S) $*" | tee -a "$OUT/progress.txt"; }
run() { # NAME ENV... -- COMMAND...: its stdout and stderr in $OUT/NAME.txt, its time in progress.txt
  local name=$1; shift
  local start=$SECONDS
  log "$name: $*"
  env "$@" > "$OUT/$name.txt" 2>&1
  log "$name exit $? after $((SECONDS - start)) s"
}
BENCH="bench --precisions bf16 --variants own --prompt-lens 512 --quiet"
if want kernels && [ -x /tmp/gpu_kernels ]; then
  run kernels-pdl /tmp/gpu_kernels --test-threads=1
  run kernels-nopdl VRAM_LAB_PDL=0 /tmp/gpu_kernels --test-threads=1
fi
if want bench; then
  for r in $(seq 1 "${ROUNDS:-2}"); do
    [ -x /tmp/vram-lab-base ] && run "base-$r" timeout 300 /tmp/vram-lab-base $BENCH --out "$OUT/base-$r"
    run "pdl-$r" timeout 300 /tmp/vram-lab $BENCH --out "$OUT/pdl-$r"
    run "nopdl-$r" VRAM_LAB_PDL=0 timeout 300 /tmp/vram-lab $BENCH --out "$OUT/nopdl-$r"
  done
fi
if want ncu; then
  ids=$(python3 -c "print(','.join(str(7 + (i * 37) % 5000) for i in range(160)))")
  log "ncu: one step's kernels (VRAM_LAB_PDL=0: ncu serializes them anyway)"
  VRAM_LAB_PDL=0 timeout 300 ncu --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    --log-file "$OUT/ncu.csv" /tmp/vram-lab generate --model synthetic:qwen2.5-7b --precision bf16 \
    --prompt-ids "$ids" --max-new-tokens 4 --json --quiet >"$OUT/gen.json" 2>"$OUT/gen.err"
  log "ncu exit $?"
  gzip -f "$OUT/ncu.csv"
fi
log done
