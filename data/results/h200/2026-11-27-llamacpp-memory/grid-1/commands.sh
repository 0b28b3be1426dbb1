export R=/tmp/results
echo "### $(date -u +%H:%M:%S) llama: SCHED_DEBUG_CELLS='1 2 4 23 25 26' bash scripts/reference/llama_memory.sh run /tmp/llm $R/llama-memory .gpu/llama-memory.tar.xz scripts/gpu/llamacpp-grid-1.csv"
SCHED_DEBUG_CELLS='1 2 4 23 25 26' bash scripts/reference/llama_memory.sh run /tmp/llm $R/llama-memory .gpu/llama-memory.tar.xz scripts/gpu/llamacpp-grid-1.csv > /tmp/results/llama.stdout.txt 2>&1; echo "### llama exit $?"
touch /tmp/results/done
