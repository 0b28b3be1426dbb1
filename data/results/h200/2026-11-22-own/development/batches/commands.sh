export R=/tmp/results
echo "### $(date -u +%H:%M:%S) prof: bash .gpu/profile.sh"
bash .gpu/profile.sh > /tmp/results/prof.stdout.txt 2>&1; echo "### prof exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions bf16 --variants kernel,gemv --prompt-lens 64 --new-tokens 64 --repeats 2 --batches 2,4,8 --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions bf16 --variants kernel,gemv --prompt-lens 64 --new-tokens 64 --repeats 2 --batches 2,4,8 --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
