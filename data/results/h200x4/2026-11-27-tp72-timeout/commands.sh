export R=/tmp/results
echo "### $(date -u +%H:%M:%S) tp72-g4: vram-lab parallel --model synthetic:qwen2.5-72b --gpus 4 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g4"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --gpus 4 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g4 > /tmp/results/tp72-g4.stdout.txt 2>&1; echo "### tp72-g4 exit $?"
echo "### $(date -u +%H:%M:%S) tp72-g2: vram-lab parallel --model synthetic:qwen2.5-72b --gpus 2 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g2"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --gpus 2 --layouts tensor --no-single --quiet --out /tmp/results/tp72-g2 > /tmp/results/tp72-g2.stdout.txt 2>&1; echo "### tp72-g2 exit $?"
echo "### $(date -u +%H:%M:%S) pp72-4x4090: vram-lab parallel --model synthetic:qwen2.5-72b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090,rtx4090,rtx4090 --no-single --quiet --out /tmp/results/pp72-4x4090"
timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090,rtx4090,rtx4090 --no-single --quiet --out /tmp/results/pp72-4x4090 > /tmp/results/pp72-4x4090.stdout.txt 2>&1; echo "### pp72-4x4090 exit $?"
touch /tmp/results/done
