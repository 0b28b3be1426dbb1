export R=/tmp/results
echo "### $(date -u +%H:%M:%S) llama-wait: bash scripts/gpu/wait_for.sh /tmp/llama-ready 900"
bash scripts/gpu/wait_for.sh /tmp/llama-ready 900 > /tmp/results/llama-wait.stdout.txt 2>&1; echo "### llama-wait exit $?"
echo "### $(date -u +%H:%M:%S) llama_ngl: LLAMA_TYPES=bf16 LLAMA_NGL=8,10 LLAMA_P=0 LLAMA_N=32 LLAMA_R=2 bash scripts/reference/llama_bench.sh run /tmp/llw $R/llama-ngl /tmp/vram-lab .gpu/llama-bench.xz"
LLAMA_TYPES=bf16 LLAMA_NGL=8,10 LLAMA_P=0 LLAMA_N=32 LLAMA_R=2 bash scripts/reference/llama_bench.sh run /tmp/llw $R/llama-ngl /tmp/vram-lab .gpu/llama-bench.xz > /tmp/results/llama_ngl.stdout.txt 2>&1; echo "### llama_ngl exit $?"
echo "### $(date -u +%H:%M:%S) offload: vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp $R/llama-ngl/llama-bench.jsonl --quiet --out /tmp/results/offload"
/tmp/vram-lab offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp $R/llama-ngl/llama-bench.jsonl --quiet --out /tmp/results/offload > /tmp/results/offload.stdout.txt 2>&1; echo "### offload exit $?"
touch /tmp/results/done
