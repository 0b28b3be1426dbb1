#!/usr/bin/env bash
# Issue 44's transformers cells: the report's KV-cache sweep (scripts/reference/transformers_memory.py)
# for several presets, dtypes and cards, each case in a process of its own, on the GPU as it is
# or emulating a card (a ballast outside PyTorch). Needs nothing built: PyTorch and transformers
# are on the GPU machine. `vram-lab check --results DIR` reads the JSON lines it writes.
#   there: OUT=dir bash scripts/gpu/transformers_memory.sh        (CASES="name|args;..." to choose)
# The cases run in a session of their own (results in /tmp/tfm-results); each call waits up to
# WAIT seconds (default 540), then packs what exists into $OUT/results.tar.gz. Called again while
# they go on, it only waits and packs.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
R=/tmp/tfm-results
WAIT=${WAIT:-540}
mkdir -p "$OUT" "$R"
py="python3 scripts/reference/transformers_memory.py sweep"
m=data/models
default="\
qwen2.5-7b-bf16-rtx4090|--model $m/qwen2.5-7b.json --dtype bfloat16 --card 24084.5 --load pretrained --trace-lens 1024,2048;\
qwen2.5-7b-bf16-gpu|--model $m/qwen2.5-7b.json --dtype bfloat16 --load pretrained --max 65536;\
qwen2.5-7b-f32-rtx4090|--model $m/qwen2.5-7b.json --dtype float32 --card 24084.5 --load synthetic;\
qwen2.5-7b-f32-gpu|--model $m/qwen2.5-7b.json --dtype float32 --load synthetic --max 16384 --trace-lens 1024;\
qwen2.5-1.5b-bf16-a4000|--model $m/qwen2.5-1.5b.json --dtype bfloat16 --card 16376 --load pretrained --trace-lens 1024;\
qwen2.5-1.5b-f32-gpu|--model $m/qwen2.5-1.5b.json --dtype float32 --load synthetic --max 32768;\
qwen3-8b-bf16-rtx4090|--model $m/qwen3-8b.json --dtype bfloat16 --card 24084.5 --load synthetic --trace-lens 1024;\
llama-3.1-8b-bf16-gpu|--model $m/llama-3.1-8b.json --dtype bfloat16 --load synthetic --max 32768 --trace-lens 1024;\
mistral-7b-bf16-gpu|--model $m/mistral-7b.json --dtype bfloat16 --load synthetic --max 32768 --trace-lens 1024;\
qwen2.5-14b-bf16-rtx4090|--model $m/qwen2.5-14b.json --dtype bfloat16 --card 24084.5 --load synthetic;\
qwen2.5-14b-bf16-gpu|--model $m/qwen2.5-14b.json --dtype bfloat16 --load synthetic --max 32768"
CASES=${CASES:-$default}
if [ ! -e "$R/started" ]; then
  nvidia-smi > "$R/nvidia-smi.txt" 2>&1
  date -u +%Y-%m-%dT%H:%M:%SZ > "$R/started"
  script=$R/commands.sh
  : > "$script"
  IFS=';' read -ra cases <<< "$CASES"
  for c in "${cases[@]}"; do
    name=${c%%|*}; args=${c#*|}
    echo "echo \"### \$(date -u +%H:%M:%S) $name: $py $args --scratch /tmp --out $R/$name.jsonl\"" >> "$script"
    echo "timeout ${TIMEOUT:-300} $py $args --scratch /tmp --out $R/$name.jsonl > $R/$name.log 2>&1; echo \"### $name exit \$?\"" >> "$script"
  done
  echo "date -u +%Y-%m-%dT%H:%M:%SZ > $R/done" >> "$script"
  cat "$script"
  setsid bash "$script" >> "$R/progress.txt" 2>&1 &
fi
bash scripts/gpu/wait_for.sh "$R/done" "$WAIT" || echo "### still running after ${WAIT} s: call again"
cat "$R/progress.txt"
tar czf "$OUT/results.tar.gz" -C /tmp tfm-results
