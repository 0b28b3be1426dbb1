export R=/tmp/results
echo "### $(date -u +%H:%M:%S) llq: bash scripts/reference/llama_quantize.sh build /tmp/llq .gpu/llama.cpp.tar.xz && bash scripts/reference/llama_quantize.sh run /tmp/llq $R/llama-quantize-q4_k_m /tmp/vram-lab qwen2.5-7b q4_k_m"
bash scripts/reference/llama_quantize.sh build /tmp/llq .gpu/llama.cpp.tar.xz && bash scripts/reference/llama_quantize.sh run /tmp/llq $R/llama-quantize-q4_k_m /tmp/vram-lab qwen2.5-7b q4_k_m > /tmp/results/llq.stdout.txt 2>&1; echo "### llq exit $?"
touch /tmp/results/done
