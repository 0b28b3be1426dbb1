export R=/tmp/results
echo "### $(date -u +%H:%M:%S) prof: bash .gpu/profile.sh"
bash .gpu/profile.sh > /tmp/results/prof.stdout.txt 2>&1; echo "### prof exit $?"
touch /tmp/results/done
