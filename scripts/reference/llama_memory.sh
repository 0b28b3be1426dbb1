#!/usr/bin/env bash
# llama.cpp's device memory beside `vram-lab estimate --engine llama.cpp`: llama-completion and
# llama-server built here with CUDA, run on the GPU machine over a grid of GGUF types, contexts,
# KV-cache types, flash attention and offloaded layers, each launch's memory read twice: llama.cpp's
# own breakdown (model / context / compute per device, printed at exit) and the process's device
# memory as nvidia-smi lists it (the CUDA context and llama.cpp's pools included).
#
#   scripts/reference/llama_memory.sh build WORK BIN.tar.xz       # here: the two tools, packed
#   scripts/reference/llama_memory.sh write WORK LAB GRID.csv      # there: the GGUFs
#   scripts/reference/llama_memory.sh run   WORK OUT BIN.tar.xz GRID.csv   # there: the launches
#
# `build` takes llama.cpp from the llama-cpp-python sdist on PyPI (the version
# scripts/reference/llama_quantize.sh uses) and needs a CUDA toolkit (scripts/cuda/setup-cuda-build.sh
# installs one); CUDA_ARCH (default 90: H100/H200; 89 for an RTX 4090, 86 for a 3090 or A4000).
# Static except for cuBLAS and the CUDA runtime, which the GPU machine has beside PyTorch.
# The server's web UI is left out (LLAMA_BUILD_UI=OFF, no prebuilt download): the API is the same.
set -euo pipefail
cmd=$1 WORK=$(realpath -m "$2")
SDIST_VERSION=0.3.36
mkdir -p "$WORK"

if [ "$cmd" = build ]; then
  BIN=$(realpath -m "$3")
  command -v nvcc >/dev/null || { [ -f /opt/cuda13/env.sh ] && source /opt/cuda13/env.sh; }
  [ -x "$WORK/venv/bin/cmake" ] || { python3 -m venv "$WORK/venv" && "$WORK/venv/bin/pip" install --quiet cmake; }
  SRC=$WORK/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp
  [ -d "$SRC" ] || {
    "$WORK/venv/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$SDIST_VERSION" -d "$WORK"
    tar xzf "$WORK/llama_cpp_python-$SDIST_VERSION.tar.gz" -C "$WORK"
  }
  commit=$(cat "$WORK/llama_cpp_python-$SDIST_VERSION/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || echo "sdist $SDIST_VERSION")
  cpu=${LLAMA_CPU_FLAGS:--DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON}
  # shellcheck disable=SC2086
  "$WORK/venv/bin/cmake" -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DGGML_NATIVE=OFF $cpu \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$WORK/cmake.log"
  # LLAMA_TARGETS=llama-completion builds the one tool the grid launches (the server takes longer).
  targets=${LLAMA_TARGETS:-llama-completion llama-server}
  # shellcheck disable=SC2086
  "$WORK/venv/bin/cmake" --build "$WORK/build" --target $targets -j "$(nproc)" >>"$WORK/build.log"
  mkdir -p "$WORK/pack"
  for t in $targets; do strip -o "$WORK/pack/$t" "$WORK/build/bin/$t"; done
  echo "$commit" >"$WORK/pack/commit"
  mkdir -p "$(dirname "$BIN")"
  tar cf - -C "$WORK/pack" . | xz -9e -T2 >"$BIN"
  ls -la "$BIN"
  exit 0
fi

# write: the lab writes each (preset, type) of GRID as a GGUF in WORK, all at once in parallel
# (synthetic weights with Qwen2.5's tokenizer; memory does not depend on the values).
#   scripts/reference/llama_memory.sh write WORK LAB GRID.csv
# run: every launch of GRID.csv (a header, then one launch per row:
#   preset,type,ctx,ngl,fa,ctk,ctv,batch,ubatch[,ncmoe,ot,swa,ts]
# where ncmoe, when set, is --n-cpu-moe, ot a pattern whose tensors stay on the host
# (-ot PATTERN=CPU; no commas), swa `full` for --swa-full and ts llama.cpp's -ts over several
# GPUs, colon-separated) over the GGUFs `write` left in WORK (it waits for them): llama-completion with `-fit off` (so llama.cpp changes
# none of the flags it is given), a prompt longer than the micro-batch and 4 decoded tokens, while
# nvidia-smi lists the process's device memory every 50 ms (the peak is kept). OUT gets
# launches.csv (the grid, exit code, seconds, nvidia-smi's peak) and one log per launch (llama.cpp's
# own buffer sizes, which `vram-lab check` reads). The two steps may run in two device calls (the
# tools and the lab binary together pass the 64 MiB a call carries).
#   scripts/reference/llama_memory.sh run WORK OUT BIN.tar.xz GRID.csv
if [ "$cmd" = write ]; then
  LAB=$(realpath "$3") GRID=$(realpath "$4")
  mkdir -p "$WORK/quantize-logs"
  pids=()
  while IFS=, read -r preset type _; do
    [ -s "$WORK/$preset-$type.gguf" ] && continue
    ("$LAB" quantize --quiet --device cpu --model "synthetic:$preset" --type "$type" --to "$WORK/$preset-$type.gguf.part" \
      >"$WORK/quantize-logs/$preset-$type.log" 2>&1 && mv "$WORK/$preset-$type.gguf.part" "$WORK/$preset-$type.gguf") &
    pids+=($!)
  done < <(tail -n +2 "$GRID" | cut -d, -f1,2 | sort -u)
  for p in "${pids[@]}"; do wait "$p"; done
  ls -la "$WORK"/*.gguf
  df -h "$WORK"
  touch "$WORK/written"
  exit 0
fi

OUT=$(realpath -m "$3") BIN=$(realpath "$4") GRID=$(realpath "$5")
mkdir -p "$OUT/logs" "$WORK/bin"
# The GGUFs may still be being written (a write started in the call before).
for _ in $(seq 360); do [ -e "$WORK/written" ] && break; sleep 5; done
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" "$BIN" "$WORK/bin"
chmod +x "$WORK/bin/"llama-*
cp "$WORK/bin/commit" "$OUT/llama-cpp-commit.txt"
cp "$GRID" "$OUT/grid.csv"
cp -r "$WORK/quantize-logs" "$OUT/" 2>/dev/null || true
# About 3,000 tokens of text, more than the largest micro-batch the grid uses.
python3 -c "import sys; open(sys.argv[1], 'w').write('显存解剖学: the KV cache grows with every token, the weights do not. 权重不变, 缓存增长。 ' * 130)" "$WORK/prompt.txt"
echo "id,preset,type,ctx,ngl,fa,ctk,ctv,batch,ubatch,ncmoe,ot,swa,ts,rc,seconds,smi_peak_mib" >"$OUT/launches.csv"
id=0
tail -n +2 "$GRID" | while IFS=, read -r preset type ctx ngl fa ctk ctv batch ubatch ncmoe ot swa ts; do
  [ -n "$preset" ] || continue
  gguf=$WORK/$preset-$type.gguf
  id=$((id + 1))
  log=$OUT/logs/launch-$id.log
  # SCHED_DEBUG_CELLS="1 4": those launches also print llama.cpp's graph, node by node, with the
  # backend of each (GGML_SCHED_DEBUG=2, debug-level lines: -v): the order its allocator sees.
  # -lv 4: llama.cpp's buffer sizes and its memory breakdown are trace-level lines.
  dbg=0 verbosity="-lv 4"
  case " ${SCHED_DEBUG_CELLS:-} " in *" $id "*) dbg=2 verbosity="-v" ;; esac
  t0=$(date +%s.%N)
  host=()
  [ -n "${ncmoe:-}" ] && host+=(--n-cpu-moe "$ncmoe")
  [ -n "${ot:-}" ] && host+=(-ot "$ot=CPU")
  [ "${swa:-}" = full ] && host+=(--swa-full)
  # ts: llama.cpp's -ts over several GPUs, its shares separated by colons (3:2).
  [ -n "${ts:-}" ] && host+=(-sm layer -ts "${ts//:/,}")
  GGML_SCHED_DEBUG=$dbg "$WORK/bin/llama-completion" -m "$gguf" -c "$ctx" -ngl "$ngl" -fa "$fa" -ctk "$ctk" -ctv "$ctv" \
    -b "$batch" -ub "$ubatch" "${host[@]}" $verbosity -fit off -f "$WORK/prompt.txt" -n 4 --temp 0 -no-cnv --no-display-prompt >"$log" 2>&1 </dev/null &
  pid=$!
  peak=0
  while kill -0 "$pid" 2>/dev/null; do
    # One figure per GPU the process holds memory on, in nvidia-smi's order, colon-separated; each
    # GPU's peak kept (a plain number on one GPU).
    m=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk -F', ' -v p="$pid" '$1 == p {print $2}' | paste -sd:)
    [ -n "$m" ] && peak=$(awk -v a="$peak" -v b="$m" 'BEGIN { n = split(a, x, ":"); k = split(b, y, ":"); if (k > n) n = k; for (i = 1; i <= n; i++) printf "%s%d", (i > 1 ? ":" : ""), (x[i] + 0 > y[i] + 0 ? x[i] : y[i]); print "" }')
    sleep 0.05
  done
  wait "$pid" && rc=0 || rc=$?
  t1=$(date +%s.%N)
  echo "$id,$preset,$type,$ctx,$ngl,$fa,$ctk,$ctv,$batch,$ubatch,${ncmoe:-},${ot:-},${swa:-},${ts:-},$rc,$(awk "BEGIN{print $t1 - $t0}"),$peak" >>"$OUT/launches.csv"
done
