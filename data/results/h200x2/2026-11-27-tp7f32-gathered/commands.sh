export R=/tmp/results
echo "### $(date -u +%H:%M:%S) tp7f32: vram-lab parallel --model synthetic:qwen2.5-7b --precision f32 --gpus 2 --layouts tensor --quiet --out /tmp/results/tp7f32"
timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --precision f32 --gpus 2 --layouts tensor --quiet --out /tmp/results/tp7f32 > /tmp/results/tp7f32.stdout.txt 2>&1; echo "### tp7f32 exit $?"
touch /tmp/results/done
