export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kern: bash .gpu/kern.sh"
bash .gpu/kern.sh > /tmp/results/kern.stdout.txt 2>&1; echo "### kern exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions bf16,q4_k_m --variants own --prompt-lens 512 --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions bf16,q4_k_m --variants own --prompt-lens 512 --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
