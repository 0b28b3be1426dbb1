export R=/tmp/results
echo "### $(date -u +%H:%M:%S) test-gpu_parallel: bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz"
bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz > /tmp/results/test-gpu_parallel.stdout.txt 2>&1; echo "### test-gpu_parallel exit $?"
echo "### $(date -u +%H:%M:%S) pp7: vram-lab parallel --model synthetic:qwen2.5-7b --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp7"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp7 > /tmp/results/pp7.stdout.txt 2>&1; echo "### pp7 exit $?"
echo "### $(date -u +%H:%M:%S) pp7f32: vram-lab parallel --model synthetic:qwen2.5-7b --precision f32 --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp7f32"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --precision f32 --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp7f32 > /tmp/results/pp7f32.stdout.txt 2>&1; echo "### pp7f32 exit $?"
echo "### $(date -u +%H:%M:%S) pp14: vram-lab parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp14"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-14b --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp14 > /tmp/results/pp14.stdout.txt 2>&1; echo "### pp14 exit $?"
echo "### $(date -u +%H:%M:%S) pp32: vram-lab parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp32"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --gpus 2 --layouts pipeline --quiet --out /tmp/results/pp32 > /tmp/results/pp32.stdout.txt 2>&1; echo "### pp32 exit $?"
touch /tmp/results/done
