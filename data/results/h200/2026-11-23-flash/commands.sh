export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: bash .gpu/kernels.sh"
bash .gpu/kernels.sh > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) torch-bench: python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl"
python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl > /tmp/results/torch-bench.stdout.txt 2>&1; echo "### torch-bench exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --pytorch $R/torch-bench.jsonl --variants separate,fused,graph,kernel,gemv,own --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --pytorch $R/torch-bench.jsonl --variants separate,fused,graph,kernel,gemv,own --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
