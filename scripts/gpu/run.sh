#!/usr/bin/env bash
# A GPU run on a machine without a Rust toolchain: `bash scripts/gpu/run.sh [vram-lab run flags]`.
# Expects .gpu/vram-lab.xz (made by scripts/cuda/build-gpu-binary.sh). Starts `vram-lab run` in its
# own process session (so it outlives a shell that is cut off), waits for it up to WAIT seconds
# (default 560), and packs what exists into $OUT/results.tar.gz: the run folder (manifest.json,
# report.html, CSVs, console.txt), nvidia-smi, the binary's info and this log. Called again while
# the run is going, it only waits and packs.
set -u
R=/tmp/results
OUT=${OUT:-/tmp/out}
WAIT=${WAIT:-560}
mkdir -p "$R" "$OUT"
exec > >(tee -a "$R/log.txt") 2>&1
if [ ! -x /tmp/vram-lab ]; then
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
  chmod +x /tmp/vram-lab
fi
source scripts/cuda/gpu-env.sh
if [ ! -e "$R/started" ]; then
  nvidia-smi > "$R/nvidia-smi.txt" 2>&1
  date -u +%Y-%m-%dT%H:%M:%SZ > "$R/started"
  /tmp/vram-lab info --quiet > "$R/info.txt" 2>&1
  echo "### vram-lab run --quiet --out $R/run $*"
  setsid bash -c "/tmp/vram-lab run --quiet --out $R/run $* > $R/run.stdout.txt 2>&1; echo \$? > $R/exit" &
fi
t0=$SECONDS
while [ ! -e "$R/exit" ] && [ $((SECONDS - t0)) -lt "$WAIT" ]; do sleep 5; done
if [ -e "$R/exit" ]; then echo "### exit $(cat "$R/exit")"; else echo "### still running after ${WAIT} s: call again"; fi
tail -n 30 "$R/run.stdout.txt"
tar czf "$OUT/results.tar.gz" -C /tmp results
ls -la "$OUT"
