export R=/tmp/results
echo "### $(date -u +%H:%M:%S) run: vram-lab run --quiet --out /tmp/results/run"
/tmp/vram-lab run --quiet --out /tmp/results/run > /tmp/results/run.stdout.txt 2>&1; echo "### run exit $?"
touch /tmp/results/done
