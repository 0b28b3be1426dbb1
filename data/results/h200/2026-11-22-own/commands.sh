export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: bash .gpu/kernels.sh"
bash .gpu/kernels.sh > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) torch-bench: python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl"
python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl > /tmp/results/torch-bench.stdout.txt 2>&1; echo "### torch-bench exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --pytorch $R/torch-bench.jsonl --batches 2,16 --variants separate,fused,graph,kernel,gemv,own --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --pytorch $R/torch-bench.jsonl --batches 2,16 --variants separate,fused,graph,kernel,gemv,own --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
echo "### $(date -u +%H:%M:%S) ids-check: vram-lab bench --precisions f32,bf16,q4 --variants separate,fused,graph,kernel,gemv,own --prompt-lens 64 --new-tokens 64 --repeats 2 --quiet --out /tmp/results/ids-check"
/tmp/vram-lab bench --precisions f32,bf16,q4 --variants separate,fused,graph,kernel,gemv,own --prompt-lens 64 --new-tokens 64 --repeats 2 --quiet --out /tmp/results/ids-check > /tmp/results/ids-check.stdout.txt 2>&1; echo "### ids-check exit $?"
echo "### $(date -u +%H:%M:%S) run: vram-lab run --quiet --out /tmp/results/run"
/tmp/vram-lab run --quiet --out /tmp/results/run > /tmp/results/run.stdout.txt 2>&1; echo "### run exit $?"
touch /tmp/results/done
