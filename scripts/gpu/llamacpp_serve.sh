#!/usr/bin/env bash
# Issue 44: llama-server launched with the flags `plan --engine llama.cpp` chose, each on the card it
# was planned for (an RTX 4090 or an A4000, emulated with a ballast), every prompt filling the
# context: does any run out of memory? (scripts/reference/llama_serve.py; PLANS, default
# scripts/gpu/llamacpp-serve-plans.csv, made here by scripts/gpu/llamacpp_serve_plans.sh.)
#   here:  bash scripts/reference/llama_memory.sh build /tmp/llm …  (llama-server; packed alone as
#          .gpu/llama-server.tar.xz: tar of llama-server and commit, xz)
#   there: carry .gpu/vram-lab.xz:          STEP=write bash scripts/gpu/llamacpp_serve.sh   (the GGUFs)
#          carry .gpu/llama-server.tar.xz:  STEP=run bash scripts/gpu/llamacpp_serve.sh     (the launches)
# Each step runs in a session of its own under /tmp/llm-serve; a call waits up to WAIT seconds
# (default 540) and packs what exists into $OUT/results.tar.gz; called again, it only waits.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
PLANS=${PLANS:-scripts/gpu/llamacpp-serve-plans.csv}
WAIT=${WAIT:-540}
R=${RESULTS:-/tmp/llm-serve}
step=${STEP:-run}
mkdir -p "$OUT" "$R" /tmp/llm
source scripts/cuda/gpu-env.sh
if [ ! -e "$R/$step.started" ]; then
  date -u +%Y-%m-%dT%H:%M:%SZ > "$R/$step.started"
  if [ "$step" = write ]; then
    python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
    chmod +x /tmp/vram-lab
    setsid bash -c "bash scripts/reference/llama_memory.sh write /tmp/llm /tmp/vram-lab $PLANS > $R/write.log 2>&1; date > $R/write.done" &
  else
    mkdir -p /tmp/llm/serve-bin
    python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" .gpu/llama-server.tar.xz /tmp/llm/serve-bin
    chmod +x /tmp/llm/serve-bin/llama-server
    cp "$PLANS" "$R/plans.csv"
    cp /tmp/llm/serve-bin/commit "$R/llama-cpp-commit.txt"
    nvidia-smi > "$R/nvidia-smi.txt" 2>&1
    setsid bash -c "python3 scripts/reference/llama_serve.py --plans $PLANS --gguf-dir /tmp/llm --server /tmp/llm/serve-bin/llama-server --out $R/launches > $R/run.log 2>&1; date > $R/run.done" &
  fi
fi
bash scripts/gpu/wait_for.sh "$R/$step.done" "$WAIT" || echo "### $step still running after ${WAIT} s: call again"
tail -25 "$R/$step.log"
tar czf "$OUT/results.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
