export R=/tmp/results
echo "### $(date -u +%H:%M:%S) torch-frag: python3 scripts/reference/pytorch_reference.py frag --card 24084.5 --out $R/torch-frag.jsonl"
python3 scripts/reference/pytorch_reference.py frag --card 24084.5 --out $R/torch-frag.jsonl > /tmp/results/torch-frag.stdout.txt 2>&1; echo "### torch-frag exit $?"
echo "### $(date -u +%H:%M:%S) frag: vram-lab frag --model synthetic:qwen2.5-7b --card rtx4090 --pytorch $R/torch-frag.jsonl --quiet --out /tmp/results/frag"
/tmp/vram-lab frag --model synthetic:qwen2.5-7b --card rtx4090 --pytorch $R/torch-frag.jsonl --quiet --out /tmp/results/frag > /tmp/results/frag.stdout.txt 2>&1; echo "### frag exit $?"
echo "### $(date -u +%H:%M:%S) leaks: vram-lab leaks --model synthetic:qwen2.5-7b --card rtx4090 --quiet --out /tmp/results/leaks"
/tmp/vram-lab leaks --model synthetic:qwen2.5-7b --card rtx4090 --quiet --out /tmp/results/leaks > /tmp/results/leaks.stdout.txt 2>&1; echo "### leaks exit $?"
echo "### $(date -u +%H:%M:%S) torch-offload: python3 scripts/reference/pytorch_reference.py offload --card 24084.5 --new-tokens 20 --out $R/torch-offload.jsonl"
python3 scripts/reference/pytorch_reference.py offload --card 24084.5 --new-tokens 20 --out $R/torch-offload.jsonl > /tmp/results/torch-offload.stdout.txt 2>&1; echo "### torch-offload exit $?"
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --model synthetic:qwen2.5-7b --card rtx4090 --pytorch $R/torch-offload.jsonl --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --model synthetic:qwen2.5-7b --card rtx4090 --pytorch $R/torch-offload.jsonl --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
touch /tmp/results/done
