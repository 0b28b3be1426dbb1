export R=/tmp/results
echo "### $(date -u +%H:%M:%S) torch-bench: python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl"
python3 scripts/reference/pytorch_reference.py bench --out $R/torch-bench.jsonl > /tmp/results/torch-bench.stdout.txt 2>&1; echo "### torch-bench exit $?"
echo "### $(date -u +%H:%M:%S) llama: bash scripts/reference/llama_bench.sh run /tmp/llw $R/llama-cpp /tmp/vram-lab .gpu/llama-bench.xz"
bash scripts/reference/llama_bench.sh run /tmp/llw $R/llama-cpp /tmp/vram-lab .gpu/llama-bench.xz > /tmp/results/llama.stdout.txt 2>&1; echo "### llama exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions bf16,q4_k_m --variants graph,own --pytorch $R/torch-bench.jsonl --llama-cpp $R/llama-cpp/llama-bench.jsonl --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions bf16,q4_k_m --variants graph,own --pytorch $R/torch-bench.jsonl --llama-cpp $R/llama-cpp/llama-bench.jsonl --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
