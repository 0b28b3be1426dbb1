export R=/tmp/results
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --card rtx4090 --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --card rtx4090 --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
echo "### $(date -u +%H:%M:%S) leaks: vram-lab leaks --card rtx4090 --quiet --out /tmp/results/leaks"
/tmp/vram-lab leaks --card rtx4090 --quiet --out /tmp/results/leaks > /tmp/results/leaks.stdout.txt 2>&1; echo "### leaks exit $?"
echo "### $(date -u +%H:%M:%S) bandwidth: vram-lab bandwidth --card rtx4090 --quiet --out /tmp/results/bandwidth"
/tmp/vram-lab bandwidth --card rtx4090 --quiet --out /tmp/results/bandwidth > /tmp/results/bandwidth.stdout.txt 2>&1; echo "### bandwidth exit $?"
touch /tmp/results/done
