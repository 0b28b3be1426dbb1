export R=/tmp/results
echo "### $(date -u +%H:%M:%S) a4000: vram-lab kv --card a4000 --sweeps prefill --quiet --out /tmp/results/a4000"
/tmp/vram-lab kv --card a4000 --sweeps prefill --quiet --out /tmp/results/a4000 > /tmp/results/a4000.stdout.txt 2>&1; echo "### a4000 exit $?"
echo "### $(date -u +%H:%M:%S) 3b: vram-lab kv --model synthetic:qwen2.5-3b --card rtx4090 --sweeps prefill --precisions bf16 --logits all --quiet --out /tmp/results/3b"
/tmp/vram-lab kv --model synthetic:qwen2.5-3b --card rtx4090 --sweeps prefill --precisions bf16 --logits all --quiet --out /tmp/results/3b > /tmp/results/3b.stdout.txt 2>&1; echo "### 3b exit $?"
touch /tmp/results/done
