#!/usr/bin/env bash
# All seven notebooks Live beside `vram-lab run`, on one machine of four GPUs, in one call (or two:
# called again while they run, it only waits and packs). Each GPU runs its share, so the runs do
# not share a GPU's memory or bandwidth:
#   GPU 0: 00_setup 01_anatomy 02_kv_cache 03_allocator   GPU 1: 04_offload   GPU 2: 05_estimator
#   GPU 3: `vram-lab run` (the command the notebooks are compared with), then GPUs 2 and 3: 06_multi_gpu
# Expects .gpu/vram-lab.xz, .gpu/notebooks_live.xz and .gpu/commit (scripts/cuda/build-gpu-binary.sh
# with FEATURES=nccl, and the example built the same way). Writes /tmp/results (notebooks/*.out,
# the Live runs' folders, the run's folder, logs) packed into $OUT/results.tar.gz.
#   WAIT=560 bash scripts/gpu/notebooks_four_gpus.sh
set -u
cd "$(dirname "$0")/../.."
R=/tmp/results
OUT=${OUT:-/tmp/out}
WAIT=${WAIT:-560}
mkdir -p "$R/notebooks" "$OUT"
if [ ! -e "$R/started" ]; then
  date -u +%Y-%m-%dT%H:%M:%SZ > "$R/started"
  for b in vram-lab notebooks_live; do
    python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/$b.xz'), open('/tmp/$b','wb'))"
    chmod +x "/tmp/$b"
  done
  source scripts/cuda/gpu-env.sh
  nvidia-smi > "$R/nvidia-smi.txt" 2>&1
  nvidia-smi topo -m > "$R/topo.txt" 2>&1
  /tmp/vram-lab info --quiet > "$R/info.txt" 2>&1
  cat > "$R/jobs.sh" <<EOF
cd $PWD
export NCCL_NVLS_ENABLE=0
(CUDA_VISIBLE_DEVICES=0 R=$R bash scripts/gpu/notebooks_live.sh 00_setup 01_anatomy 02_kv_cache 03_allocator > $R/gpu0.log 2>&1; echo "exit \$?" >> $R/gpu0.log) &
(CUDA_VISIBLE_DEVICES=1 R=$R bash scripts/gpu/notebooks_live.sh 04_offload > $R/gpu1.log 2>&1; echo "exit \$?" >> $R/gpu1.log) &
(CUDA_VISIBLE_DEVICES=2 R=$R bash scripts/gpu/notebooks_live.sh 05_estimator > $R/gpu2.log 2>&1; echo "exit \$?" >> $R/gpu2.log) &
p2=\$!
(CUDA_VISIBLE_DEVICES=3 /tmp/vram-lab run --quiet --out $R/run > $R/run.stdout.txt 2>&1; echo "exit \$?" >> $R/run.stdout.txt) &
p3=\$!
wait \$p2 \$p3
CUDA_VISIBLE_DEVICES=2,3 R=$R bash scripts/gpu/notebooks_live.sh 06_multi_gpu > $R/gpu23.log 2>&1; echo "exit \$?" >> $R/gpu23.log
wait
mkdir -p $R/notebook-runs && cp -r target/notebook-runs/. $R/notebook-runs/ 2>/dev/null
date -u +%Y-%m-%dT%H:%M:%SZ > $R/done
EOF
  setsid bash "$R/jobs.sh" > "$R/jobs.log" 2>&1 < /dev/null &
  echo $! > "$R/jobs.pid"
fi
t0=$SECONDS
while [ ! -e "$R/done" ] && [ $((SECONDS - t0)) -lt "$WAIT" ]; do sleep 5; done
tail -n 3 "$R"/gpu*.log "$R/run.stdout.txt" 2>/dev/null
[ -e "$R/done" ] || echo "### still running after ${WAIT} s: call again"
tar czf "$OUT/results.tar.gz" --exclude=report.html -C /tmp results
ls -la "$OUT"
