export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kern: bash scripts/gpu/test_binary.sh .gpu/gpu_kernels.xz"
bash scripts/gpu/test_binary.sh .gpu/gpu_kernels.xz > /tmp/results/kern.stdout.txt 2>&1; echo "### kern exit $?"
echo "### $(date -u +%H:%M:%S) torch-bench: python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl"
python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl > /tmp/results/torch-bench.stdout.txt 2>&1; echo "### torch-bench exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions bf16 --variants own --pytorch $R/torch-bench.jsonl --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions bf16 --variants own --pytorch $R/torch-bench.jsonl --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
