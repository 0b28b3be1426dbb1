export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: bash .gpu/kernels.sh"
bash .gpu/kernels.sh > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) dev: vram-lab bench --precisions bf16,q4 --variants fused,own --prompt-lens 512,32768 --repeats 2 --new-tokens 64 --quiet --out /tmp/results/dev"
/tmp/vram-lab bench --precisions bf16,q4 --variants fused,own --prompt-lens 512,32768 --repeats 2 --new-tokens 64 --quiet --out /tmp/results/dev > /tmp/results/dev.stdout.txt 2>&1; echo "### dev exit $?"
touch /tmp/results/done
