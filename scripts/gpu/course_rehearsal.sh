#!/usr/bin/env bash
# scripts/course-check.sh rehearsed on the test GPU (an H100 or H200 emulating an RTX 4090) with the
# RTX 4090's build, on a machine without Rust: the course check with the 8.9 build (compute-8.9 PTX,
# which this card's driver compiles), then, once it is done, the 9.0 build's logits (the figure the
# course's card is judged against) on the same card. The check runs in a session of its own in
# /tmp/course-check, so it outlives a call; a later call only waits. Each call copies what exists to
# $OUT. The binaries pass 64 MiB together, so they may come in two calls: .gpu/ (vram-lab-89.xz,
# notebooks_live-89.xz) first, then .gpu90/vram-lab.xz; what a call unpacks stays in /tmp/bin.
#   here:  CUDA_COMPUTE_CAP=89 SUFFIX=-89 CARGO_TARGET_DIR=target/cc89 bash scripts/cuda/build-gpu-binary.sh
#          (and its notebooks_live example, packed as .gpu/notebooks_live-89.xz), bash scripts/cuda/build-gpu-binary.sh
#   there: WAIT=540 STEPS="..." NOTEBOOKS="..." bash scripts/gpu/course_rehearsal.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
WAIT=${WAIT:-540}
CC=/tmp/course-check
mkdir -p /tmp/bin "$OUT"
for f in .gpu/vram-lab-89 .gpu/notebooks_live-89 .gpu90/vram-lab; do
  bin=/tmp/bin/$(basename "$f")
  if [ -f "$f.xz" ] && [ ! -x "$bin" ]; then
    python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$f.xz" "$bin"
    chmod +x "$bin"
  fi
done
source scripts/cuda/gpu-env.sh
if [ ! -e "$CC" ]; then
  cat .gpu/commit > /tmp/bin/commit 2>/dev/null
  VRAM_LAB_BIN=/tmp/bin/vram-lab-89 NOTEBOOKS_BIN=/tmp/bin/notebooks_live-89 CARD=rtx4090 VRAM_LAB_COMMIT=$(cat .gpu/commit) \
    setsid bash scripts/course-check.sh "$CC" > /tmp/course-check.log 2>&1 < /dev/null &
  echo $! > /tmp/course-check.pid
fi
start=$(date +%s)
while [ ! -e "$CC/summary.txt" ] && [ $(( $(date +%s) - start )) -lt "$WAIT" ]; do
  sleep 5
done
# The 9.0 build on the card the check left free.
if [ -e "$CC/summary.txt" ] && [ -x /tmp/bin/vram-lab ] && [ ! -e /tmp/bin/parity-90.json ]; then
  /tmp/bin/vram-lab parity --model synthetic:qwen2.5-0.5b --json > /tmp/bin/parity-90.json 2> /tmp/bin/parity-90.err
  echo "parity 9.0 exit $?"
fi
cp /tmp/bin/parity-90.* /tmp/bin/commit "$OUT/" 2>/dev/null
cp /tmp/course-check.log "$OUT/" 2>/dev/null
cp -r "$CC" "$OUT/course-check" 2>/dev/null
# report.html is re-rendered from a run folder (`vram-lab report DIR`); it need not travel.
find "$OUT/course-check" -name report.html -delete 2>/dev/null
cat "$CC/steps.txt" 2>/dev/null
[ -e "$CC/summary.txt" ] && cat "$CC/summary.txt" || echo "still running after ${WAIT}s"
