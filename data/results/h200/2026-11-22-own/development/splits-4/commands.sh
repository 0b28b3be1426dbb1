export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: bash .gpu/kernels.sh"
bash .gpu/kernels.sh > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions f32,bf16 --variants fused,gemv,own --prompt-lens 64 --new-tokens 64 --repeats 2 --batches 2 --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions f32,bf16 --variants fused,gemv,own --prompt-lens 64 --new-tokens 64 --repeats 2 --batches 2 --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
echo "### $(date -u +%H:%M:%S) prof: bash .gpu/profile.sh"
bash .gpu/profile.sh > /tmp/results/prof.stdout.txt 2>&1; echo "### prof exit $?"
touch /tmp/results/done
