export R=/tmp/results
echo "### $(date -u +%H:%M:%S) pp32-4090-past: vram-lab parallel --model synthetic:qwen2.5-32b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090 --prompt 27549 --new-tokens 64 --no-single --quiet --out /tmp/results/pp32-4090-past"
timeout 240 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --precision q4_k_m --layouts pipeline --cards rtx4090,rtx4090 --prompt 27549 --new-tokens 64 --no-single --quiet --out /tmp/results/pp32-4090-past > /tmp/results/pp32-4090-past.stdout.txt 2>&1; echo "### pp32-4090-past exit $?"
touch /tmp/results/done
