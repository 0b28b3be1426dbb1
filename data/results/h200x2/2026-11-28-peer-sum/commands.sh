export R=/tmp/results
echo "### $(date -u +%H:%M:%S) sums-test: bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz sums_across_gpus"
bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz sums_across_gpus > /tmp/results/sums-test.stdout.txt 2>&1; echo "### sums-test exit $?"
echo "### $(date -u +%H:%M:%S) tp7f32-g2: vram-lab parallel --model synthetic:qwen2.5-7b --gpus 2 --layouts tensor --precision f32 --quiet --out /tmp/results/tp7f32-g2"
timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --gpus 2 --layouts tensor --precision f32 --quiet --out /tmp/results/tp7f32-g2 > /tmp/results/tp7f32-g2.stdout.txt 2>&1; echo "### tp7f32-g2 exit $?"
echo "### $(date -u +%H:%M:%S) tp14-g2: vram-lab parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts tensor  --quiet --out /tmp/results/tp14-g2"
timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts tensor  --quiet --out /tmp/results/tp14-g2 > /tmp/results/tp14-g2.stdout.txt 2>&1; echo "### tp14-g2 exit $?"
echo "### $(date -u +%H:%M:%S) tp14-g2-nccl: VRAM_LAB_PEER_SUM=0 timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts tensor --no-single --quiet --out $R/tp14-g2-nccl"
VRAM_LAB_PEER_SUM=0 timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts tensor --no-single --quiet --out $R/tp14-g2-nccl > /tmp/results/tp14-g2-nccl.stdout.txt 2>&1; echo "### tp14-g2-nccl exit $?"
echo "### $(date -u +%H:%M:%S) tp32-g2: vram-lab parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts tensor  --quiet --out /tmp/results/tp32-g2"
timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts tensor  --quiet --out /tmp/results/tp32-g2 > /tmp/results/tp32-g2.stdout.txt 2>&1; echo "### tp32-g2 exit $?"
echo "### $(date -u +%H:%M:%S) tp32-g2-nccl: VRAM_LAB_PEER_SUM=0 timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts tensor --no-single --quiet --out $R/tp32-g2-nccl"
VRAM_LAB_PEER_SUM=0 timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts tensor --no-single --quiet --out $R/tp32-g2-nccl > /tmp/results/tp32-g2-nccl.stdout.txt 2>&1; echo "### tp32-g2-nccl exit $?"
touch /tmp/results/done
