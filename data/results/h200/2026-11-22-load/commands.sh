export R=/tmp/results
echo "### $(date -u +%H:%M:%S) load: vram-lab load --quiet --out /tmp/results/load"
/tmp/vram-lab load --quiet --out /tmp/results/load > /tmp/results/load.stdout.txt 2>&1; echo "### load exit $?"
touch /tmp/results/done
