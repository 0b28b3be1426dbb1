export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kern: bash .gpu/kern.sh"
bash .gpu/kern.sh > /tmp/results/kern.stdout.txt 2>&1; echo "### kern exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions bf16,q4_k_m --prompt-lens 512 --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions bf16,q4_k_m --prompt-lens 512 --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
echo "### $(date -u +%H:%M:%S) load: vram-lab load --precisions bf16 --no-gguf --quiet --out /tmp/results/load"
/tmp/vram-lab load --precisions bf16 --no-gguf --quiet --out /tmp/results/load > /tmp/results/load.stdout.txt 2>&1; echo "### load exit $?"
echo "### $(date -u +%H:%M:%S) llama: bash .gpu/call1.sh"
bash .gpu/call1.sh > /tmp/results/llama.stdout.txt 2>&1; echo "### llama exit $?"
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp $R/llama-cpp/llama-bench.jsonl --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp $R/llama-cpp/llama-bench.jsonl --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
touch /tmp/results/done
