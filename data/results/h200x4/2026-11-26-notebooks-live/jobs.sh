cd /work/main
export NCCL_NVLS_ENABLE=0
(CUDA_VISIBLE_DEVICES=0 R=/tmp/results bash scripts/gpu/notebooks_live.sh 00_setup 01_anatomy 02_kv_cache 03_allocator > /tmp/results/gpu0.log 2>&1; echo "exit $?" >> /tmp/results/gpu0.log) &
(CUDA_VISIBLE_DEVICES=1 R=/tmp/results bash scripts/gpu/notebooks_live.sh 04_offload > /tmp/results/gpu1.log 2>&1; echo "exit $?" >> /tmp/results/gpu1.log) &
(CUDA_VISIBLE_DEVICES=2 R=/tmp/results bash scripts/gpu/notebooks_live.sh 05_estimator > /tmp/results/gpu2.log 2>&1; echo "exit $?" >> /tmp/results/gpu2.log) &
p2=$!
(CUDA_VISIBLE_DEVICES=3 /tmp/vram-lab run --quiet --out /tmp/results/run > /tmp/results/run.stdout.txt 2>&1; echo "exit $?" >> /tmp/results/run.stdout.txt) &
p3=$!
wait $p2 $p3
CUDA_VISIBLE_DEVICES=2,3 R=/tmp/results bash scripts/gpu/notebooks_live.sh 06_multi_gpu > /tmp/results/gpu23.log 2>&1; echo "exit $?" >> /tmp/results/gpu23.log
wait
mkdir -p /tmp/results/notebook-runs && cp -r target/notebook-runs/. /tmp/results/notebook-runs/ 2>/dev/null
date -u +%Y-%m-%dT%H:%M:%SZ > /tmp/results/done
