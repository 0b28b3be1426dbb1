export R=/tmp/results
echo "### $(date -u +%H:%M:%S) bandwidth: vram-lab bandwidth --card rtx4090 --quiet --out /tmp/results/bandwidth"
/tmp/vram-lab bandwidth --card rtx4090 --quiet --out /tmp/results/bandwidth > /tmp/results/bandwidth.stdout.txt 2>&1; echo "### bandwidth exit $?"
echo "### $(date -u +%H:%M:%S) torch-offload: python3 scripts/reference/pytorch_reference.py offload --card 24084.5 --new-tokens 20 --out $R/torch-offload.jsonl"
python3 scripts/reference/pytorch_reference.py offload --card 24084.5 --new-tokens 20 --out $R/torch-offload.jsonl > /tmp/results/torch-offload.stdout.txt 2>&1; echo "### torch-offload exit $?"
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --card rtx4090 --new-tokens 24 --pytorch $R/torch-offload.jsonl --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --card rtx4090 --new-tokens 24 --pytorch $R/torch-offload.jsonl --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
echo "### $(date -u +%H:%M:%S) offload14: vram-lab offload --card rtx4090 --model synthetic:qwen2.5-14b --gpu-budget 21GiB --modes full,split,streamed,hybrid --new-tokens 16 --quiet --out /tmp/results/offload14"
/tmp/vram-lab offload --card rtx4090 --model synthetic:qwen2.5-14b --gpu-budget 21GiB --modes full,split,streamed,hybrid --new-tokens 16 --quiet --out /tmp/results/offload14 > /tmp/results/offload14.stdout.txt 2>&1; echo "### offload14 exit $?"
touch /tmp/results/done
