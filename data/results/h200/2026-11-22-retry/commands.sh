export R=/tmp/results
echo "### $(date -u +%H:%M:%S) run: vram-lab run --quiet --out /tmp/results/run"
/tmp/vram-lab run --quiet --out /tmp/results/run > /tmp/results/run.stdout.txt 2>&1; echo "### run exit $?"
echo "### $(date -u +%H:%M:%S) kv-alone: vram-lab kv --card rtx4090 --precisions bf16 --sweeps prefill --logits all --quiet --out /tmp/results/kv-alone"
/tmp/vram-lab kv --card rtx4090 --precisions bf16 --sweeps prefill --logits all --quiet --out /tmp/results/kv-alone > /tmp/results/kv-alone.stdout.txt 2>&1; echo "### kv-alone exit $?"
touch /tmp/results/done
