export R=/tmp/results
echo "### $(date -u +%H:%M:%S) sums-test: bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz sums_across_gpus"
bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz sums_across_gpus > /tmp/results/sums-test.stdout.txt 2>&1; echo "### sums-test exit $?"
echo "### $(date -u +%H:%M:%S) tp72-g4: vram-lab parallel --model synthetic:qwen2.5-72b --gpus 4 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g4"
timeout 300 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --gpus 4 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g4 > /tmp/results/tp72-g4.stdout.txt 2>&1; echo "### tp72-g4 exit $?"
echo "### $(date -u +%H:%M:%S) tp72-g2: vram-lab parallel --model synthetic:qwen2.5-72b --gpus 2 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g2"
timeout 300 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --gpus 2 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g2 > /tmp/results/tp72-g2.stdout.txt 2>&1; echo "### tp72-g2 exit $?"
touch /tmp/results/done
