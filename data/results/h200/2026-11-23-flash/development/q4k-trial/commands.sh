export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: bash .gpu/kernels.sh"
bash .gpu/kernels.sh > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) prof: bash .gpu/profile.sh"
bash .gpu/profile.sh > /tmp/results/prof.stdout.txt 2>&1; echo "### prof exit $?"
echo "### $(date -u +%H:%M:%S) dev3: vram-lab bench --precisions q4 --variants separate,own --prompt-lens 512 --repeats 2 --new-tokens 64 --quiet --out /tmp/results/dev3"
/tmp/vram-lab bench --precisions q4 --variants separate,own --prompt-lens 512 --repeats 2 --new-tokens 64 --quiet --out /tmp/results/dev3 > /tmp/results/dev3.stdout.txt 2>&1; echo "### dev3 exit $?"
touch /tmp/results/done
