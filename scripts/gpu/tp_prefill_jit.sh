#!/usr/bin/env bash
# Whether the ranks' slow prefill (7B F32 over two: 7.5 tok/s against 2,404 on one device) is the driver's
# first compile of the kernels on each GPU: the same run twice, in two processes (the driver keeps what it
# compiled in ~/.nv/ComputeCache between them).   there: carry .gpu/vram-lab.xz; bash scripts/gpu/tp_prefill_jit.sh
cd "$(dirname "$0")/../.."
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"; chmod +x /tmp/vram-lab
source scripts/cuda/gpu-env.sh
export NCCL_NVLS_ENABLE=0
mkdir -p $OUT/jit
ls -la ~/.nv/ComputeCache 2>&1 | head -2 > $OUT/jit/cache-before.txt
for i in 1 2; do
  s=$SECONDS
  timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --gpus 2 --layouts tensor --precision f32 --no-single --quiet --out /tmp/jit$i > $OUT/jit/run$i.stdout.txt 2>&1
  echo "run $i exit $? in $((SECONDS - s)) s" >> $OUT/jit/times.txt
  cp /tmp/jit$i/parallel/parallel_ranks.csv $OUT/jit/run$i-ranks.csv
done
du -sh ~/.nv/ComputeCache > $OUT/jit/cache-after.txt 2>&1
cat $OUT/jit/times.txt; cut -d, -f1,2,15,16 $OUT/jit/run*-ranks.csv
