export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kv: vram-lab kv --model synthetic:qwen2.5-7b --card rtx4090 --quiet --out /tmp/results/kv"
/tmp/vram-lab kv --model synthetic:qwen2.5-7b --card rtx4090 --quiet --out /tmp/results/kv > /tmp/results/kv.stdout.txt 2>&1; echo "### kv exit $?"
touch /tmp/results/done
