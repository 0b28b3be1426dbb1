export R=/tmp/results
echo "### $(date -u +%H:%M:%S) llama: LLAMA_TYPES=bf16 LLAMA_NGL=8,10 LLAMA_P=0 LLAMA_N=32 LLAMA_R=2 bash scripts/reference/llama_bench.sh run /tmp/llw $R/llama-cpp /tmp/vram-lab .gpu/llama-bench.xz"
LLAMA_TYPES=bf16 LLAMA_NGL=8,10 LLAMA_P=0 LLAMA_N=32 LLAMA_R=2 bash scripts/reference/llama_bench.sh run /tmp/llw $R/llama-cpp /tmp/vram-lab .gpu/llama-bench.xz > /tmp/results/llama.stdout.txt 2>&1; echo "### llama exit $?"
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp $R/llama-cpp/llama-bench.jsonl --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp $R/llama-cpp/llama-bench.jsonl --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
touch /tmp/results/done
