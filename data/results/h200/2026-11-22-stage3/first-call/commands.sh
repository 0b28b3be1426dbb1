export R=/tmp/results
echo "### $(date -u +%H:%M:%S) torch-frag: python3 scripts/reference/pytorch_reference.py frag --card 24084.5 --out $R/torch-frag.jsonl"
python3 scripts/reference/pytorch_reference.py frag --card 24084.5 --out $R/torch-frag.jsonl > /tmp/results/torch-frag.stdout.txt 2>&1; echo "### torch-frag exit $?"
echo "### $(date -u +%H:%M:%S) frag: vram-lab frag --card rtx4090 --pytorch $R/torch-frag.jsonl --quiet --out /tmp/results/frag"
/tmp/vram-lab frag --card rtx4090 --pytorch $R/torch-frag.jsonl --quiet --out /tmp/results/frag > /tmp/results/frag.stdout.txt 2>&1; echo "### frag exit $?"
echo "### $(date -u +%H:%M:%S) leaks: vram-lab leaks --card rtx4090 --quiet --out /tmp/results/leaks"
/tmp/vram-lab leaks --card rtx4090 --quiet --out /tmp/results/leaks > /tmp/results/leaks.stdout.txt 2>&1; echo "### leaks exit $?"
echo "### $(date -u +%H:%M:%S) kv-oom: vram-lab kv --card rtx4090 --precisions bf16 --sweeps prefill,batch --logits all --resolution 0 --quiet --out /tmp/results/kv-oom"
/tmp/vram-lab kv --card rtx4090 --precisions bf16 --sweeps prefill,batch --logits all --resolution 0 --quiet --out /tmp/results/kv-oom > /tmp/results/kv-oom.stdout.txt 2>&1; echo "### kv-oom exit $?"
echo "### $(date -u +%H:%M:%S) run: vram-lab run --quiet --out /tmp/results/run"
/tmp/vram-lab run --quiet --out /tmp/results/run > /tmp/results/run.stdout.txt 2>&1; echo "### run exit $?"
touch /tmp/results/done
