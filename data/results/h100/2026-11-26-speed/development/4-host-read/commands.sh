export R=/tmp/results
echo "### $(date -u +%H:%M:%S) bandwidth: vram-lab bandwidth --quiet --out /tmp/results/bandwidth"
/tmp/vram-lab bandwidth --quiet --out /tmp/results/bandwidth > /tmp/results/bandwidth.stdout.txt 2>&1; echo "### bandwidth exit $?"
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
touch /tmp/results/done
