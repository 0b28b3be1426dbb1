export R=/tmp/results
echo "### $(date -u +%H:%M:%S) offload-qwen3-14b: vram-lab offload --model synthetic:qwen3-14b --card rtx4090 --gpu-budget 20GiB --modes full,split,streamed,hybrid,managed-split,managed,managed-prefer-cpu,managed-read-mostly,managed-prefetch --predict-model qwen3-14b --quiet --out /tmp/results/offload-qwen3-14b"
timeout 480 /tmp/vram-lab offload --model synthetic:qwen3-14b --card rtx4090 --gpu-budget 20GiB --modes full,split,streamed,hybrid,managed-split,managed,managed-prefer-cpu,managed-read-mostly,managed-prefetch --predict-model qwen3-14b --quiet --out /tmp/results/offload-qwen3-14b > /tmp/results/offload-qwen3-14b.stdout.txt 2>&1; echo "### offload-qwen3-14b exit $?"
touch /tmp/results/done
