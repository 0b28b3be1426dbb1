export R=/tmp/results
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions f32,bf16,q4 --variants separate,fused,graph,kernel --prompt-lens 64 --new-tokens 64 --repeats 2 --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions f32,bf16,q4 --variants separate,fused,graph,kernel --prompt-lens 64 --new-tokens 64 --repeats 2 --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
