#!/usr/bin/env bash
# Issue 45 item 2: batch-1 BF16 decode beside its read ceiling (`vram-lab bench`, variant own),
# the lab's binary of this commit beside a base binary (an earlier commit's, `.gpu/vram-lab-base.xz`,
# where one is carried) and under each setting named in CONFIGS, all in one call on one GPU, the
# runs interleaved over ROUNDS so a drift of the card's clocks shows; then the kernel tests, and
# Nsight Compute over one step (the kernels' own times, as `decode_profile.sh`). Everything is
# written under $RES and packed into $OUT/decode-speed.tar (a call brings back few files).
#   here:  FEATURES=nccl TESTS=gpu_kernels bash scripts/cuda/build-gpu-binary.sh
#   there: carry .gpu/vram-lab.xz [.gpu/vram-lab-base.xz] .gpu/gpu_kernels.xz .gpu/commit;
#          CONFIGS="new:" bash scripts/gpu/decode_speed.sh "$OUT"
# A config is NAME:ENV=VALUE,ENV=VALUE (none after the colon: the binary as it is).
# BASE_ENV="ENV=V ..." is set for the base binary's runs; TOKEN_CONFIGS (default CONFIGS) are the configs
# whose greedy ids are written (after TOKENS_PROMPT ids of prompt, default 160); LONG="4096 16384" adds one
# bench of each after a prompt of that length (a long cache). ONLY="kernels bench tokens ncu" picks parts;
# ROUNDS (default 2); PRECISIONS (default bf16; several comma-separated: bf16,q4_k_m); BENCH_EXTRA more
# arguments to every bench (--allocator pages).
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/out}
RES=${RES:-/tmp/decode-speed}
mkdir -p "$OUT" "$RES"
source scripts/cuda/gpu-env.sh
source scripts/gpu/common.sh
unpack .gpu/vram-lab.xz /tmp/vram-lab
[ -e .gpu/vram-lab-base.xz ] && unpack .gpu/vram-lab-base.xz /tmp/vram-lab-base
[ -e .gpu/gpu_kernels.xz ] && unpack .gpu/gpu_kernels.xz /tmp/gpu_kernels
cp .gpu/commit "$RES/commit" 2>/dev/null
nvidia-smi > "$RES/nvidia-smi.txt" 2>&1
/tmp/vram-lab info --quiet > "$RES/info.txt" 2>&1
BENCH="bench --precisions ${PRECISIONS:-bf16} --variants own --prompt-lens 512 --quiet ${BENCH_EXTRA:-}"
if want kernels && [ -x /tmp/gpu_kernels ]; then
  run kernels /tmp/gpu_kernels --test-threads=1
fi
if want bench; then
  for r in $(seq 1 "${ROUNDS:-2}"); do
    [ -x /tmp/vram-lab-base ] && run "base-$r" ${BASE_ENV:-} timeout 300 /tmp/vram-lab-base $BENCH --out "$RES/base-$r"
    for c in ${CONFIGS:-default:}; do
      name=${c%%:*}; envs=${c#*:}
      run "$name-$r" ${envs//,/ } timeout 300 /tmp/vram-lab $BENCH --out "$RES/$name-$r"
    done
  done
  # Decoding after a long prompt (a long cache): LONG lists the prompt lengths, one run each.
  for len in ${LONG:-}; do
    [ -x /tmp/vram-lab-base ] && run "base-long$len" ${BASE_ENV:-} timeout 300 /tmp/vram-lab-base $BENCH --decode-prompt "$len" --out "$RES/base-long$len"
    for c in ${CONFIGS:-default:}; do
      name=${c%%:*}; envs=${c#*:}
      run "$name-long$len" ${envs//,/ } timeout 300 /tmp/vram-lab $BENCH --decode-prompt "$len" --out "$RES/$name-long$len"
    done
  done
  grep -h "own batch" "$RES"/*.txt > /dev/null 2>&1 && for f in "$RES"/*-[0-9]*.txt; do echo "$(basename "$f" .txt): $(grep -h 'own batch' "$f" | head -2 | tr '\n' ' ')"; done | tee "$RES/summary.txt"
fi
if want tokens; then
  # Greedy ids of every config (and the base), F32 and BF16: the same kernels' bits give the same ids.
  # TOKENS_PROMPT (default 160) ids of prompt; the base binary's too where one is carried.
  ids=$(python3 -c "print(','.join(str(7 + (i * 37) % 5000) for i in range(${TOKENS_PROMPT:-160})))")
  tokens() { # NAME BINARY ENV...
    local name=$1 bin=$2; shift 2
    for p in bf16 f32; do
      run "tokens-$name-$p" "$@" timeout 300 "$bin" generate --model synthetic:qwen2.5-7b --precision $p \
        --prompt-ids "$ids" --max-new-tokens 48 --json --quiet
    done
  }
  [ -x /tmp/vram-lab-base ] && tokens base /tmp/vram-lab-base ${BASE_ENV:-}
  for c in ${TOKEN_CONFIGS:-${CONFIGS:-default:}}; do
    name=${c%%:*}; envs=${c#*:}
    tokens "$name" /tmp/vram-lab ${envs//,/ }
  done
fi
if want ncu; then
  ids=$(python3 -c "print(','.join(str(7 + (i * 37) % 5000) for i in range(160)))")
  log "ncu: one step's kernels"
  timeout 300 ncu --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    --log-file "$RES/ncu.csv" /tmp/vram-lab generate --model synthetic:qwen2.5-7b --precision bf16 \
    --prompt-ids "$ids" --max-new-tokens 4 --json --quiet >"$RES/gen.json" 2>"$RES/gen.err"
  log "ncu exit $?"
  gzip -f "$RES/ncu.csv"
fi
log done
find "$RES" -name report.html -delete
tar -C "$(dirname "$RES")" -cf "$OUT/decode-speed.tar" "$(basename "$RES")"
