export R=/tmp/results
echo "### $(date -u +%H:%M:%S) par1: vram-lab parallel --quiet --out /tmp/results/par1"
/tmp/vram-lab parallel --quiet --out /tmp/results/par1 > /tmp/results/par1.stdout.txt 2>&1; echo "### par1 exit $?"
touch /tmp/results/done
