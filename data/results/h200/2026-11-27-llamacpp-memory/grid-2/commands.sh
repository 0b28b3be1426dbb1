export R=/tmp/results
echo "### $(date -u +%H:%M:%S) llama: SCHED_DEBUG_CELLS='0' bash scripts/reference/llama_memory.sh run /tmp/llm $R/llama-memory .gpu/llama-memory.tar.xz scripts/gpu/llamacpp-grid-2.csv"
SCHED_DEBUG_CELLS='0' bash scripts/reference/llama_memory.sh run /tmp/llm $R/llama-memory .gpu/llama-memory.tar.xz scripts/gpu/llamacpp-grid-2.csv > /tmp/results/llama.stdout.txt 2>&1; echo "### llama exit $?"
touch /tmp/results/done
