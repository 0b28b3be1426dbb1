export R=/tmp/results
echo "### $(date -u +%H:%M:%S) split: bash .gpu/split.sh"
bash .gpu/split.sh > /tmp/results/split.stdout.txt 2>&1; echo "### split exit $?"
touch /tmp/results/done
