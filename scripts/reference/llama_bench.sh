#!/usr/bin/env bash
# llama.cpp's llama-bench on the GPU, beside `vram-lab bench` and `offload` in the same call: the
# same synthetic model written by the lab as GGUF (BF16 and llama.cpp's Q4_K_M), decode and prefill
# with every layer on the GPU, and the offload sweep (-ngl) that a GPU budget allows.
#
#   scripts/reference/llama_bench.sh build WORK TARBALL BIN.xz   # here: llama-bench with CUDA, packed
#   scripts/reference/llama_bench.sh run   WORK OUT LAB BIN.xz [PRESET]   # on the GPU machine
#
# TARBALL is llama.cpp's trimmed source (`scripts/reference/llama_quantize.sh pack`). `build` needs
# a CUDA toolkit (nvcc, cuBLAS; `scripts/cuda/setup-cuda-build.sh` installs one) and builds for
# compute 9.0 (H100/H200; CUDA_ARCH=89 for an RTX 4090, 86 for a 3090 or A4000), the CPU part for
# AVX-512 (the lent machines' Xeons) unless LLAMA_CPU_FLAGS says otherwise. The GPU machine has no
# compiler for CUDA and no network: the binary is built here and carried, statically linked except
# for cuBLAS and the CUDA runtime, which it finds beside PyTorch (`scripts/cuda/gpu-env.sh`).
#
# `run` writes OUT/llama-bench-*.json (llama-bench's own JSON: one record per test) and the logs;
# `vram-lab bench --llama-cpp OUT/llama-bench.jsonl` reads them as it reads PyTorch's (the offload
# stage reads an `-ngl` sweep with `offload --llama-cpp`: LLAMA_NGL below).
set -euo pipefail
cmd=$1 WORK=$(realpath -m "$2")
mkdir -p "$WORK"

if [ "$cmd" = build ]; then
  # The toolkit that scripts/cuda/setup-cuda-build.sh installs, unless nvcc is already on PATH.
  command -v nvcc >/dev/null || { [ -f /opt/cuda13/env.sh ] && source /opt/cuda13/env.sh; }
  TARBALL=$(realpath "$3") BIN=$(realpath -m "$4")
  SRC=$WORK/llama.cpp
  [ -d "$SRC" ] || tar xJf "$TARBALL" -C "$WORK"
  CMAKE=cmake
  command -v cmake >/dev/null || { python3 -m venv "$WORK/venv" && "$WORK/venv/bin/pip" install --quiet cmake && CMAKE=$WORK/venv/bin/cmake; }
  cpu=${LLAMA_CPU_FLAGS:--DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON}
  # shellcheck disable=SC2086
  "$CMAKE" -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DGGML_NATIVE=OFF $cpu \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    >"$WORK/cmake.log"
  "$CMAKE" --build "$WORK/build" --target llama-bench -j "$(nproc)" >"$WORK/build.log"
  mkdir -p "$(dirname "$BIN")"
  strip -o "$WORK/llama-bench" "$WORK/build/bin/llama-bench"
  xz -9e -T2 -c "$WORK/llama-bench" >"$BIN"
  cat "$SRC"/VENDORED_BY_* >"$BIN.commit" 2>/dev/null || echo unknown >"$BIN.commit"
  ls -la "$BIN"
  exit 0
fi

# run: the lab writes the GGUF files (synthetic weights, seed 42: the model `vram-lab bench` loads),
# llama-bench times them, by default with every layer on the GPU: prefill of 512 tokens and 128
# decoded tokens, three repeats, flash attention on (llama.cpp's fastest setting for these).
OUT=$(realpath -m "$3") LAB=$(realpath "$4") BIN=$(realpath "$5") PRESET=${6:-qwen2.5-7b}
TYPES=${LLAMA_TYPES:-q4_k_m}
# The offload comparison: LLAMA_NGL=8,10 LLAMA_P=0 LLAMA_N=32 LLAMA_R=2 (a decode per -ngl, the rest
# of the layers on the host's cores), read by `vram-lab offload --llama-cpp`.
NGL=${LLAMA_NGL:-99} P=${LLAMA_P:-512} N=${LLAMA_N:-128} REPS=${LLAMA_R:-3}
mkdir -p "$OUT"
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$BIN" "$WORK/llama-bench"
chmod +x "$WORK/llama-bench"
cat "$BIN.commit" >"$OUT/llama-cpp-commit.txt" 2>/dev/null || true
for t in ${TYPES//,/ }; do
  t0=$(date +%s)
  "$LAB" quantize --quiet --model "synthetic:$PRESET" --type "$t" --to "$WORK/$t.gguf" >"$OUT/lab-quantize-$t.log" 2>&1
  t1=$(date +%s)
  "$WORK/llama-bench" -m "$WORK/$t.gguf" -ngl "$NGL" -fa 1 -p "$P" -n "$N" -r "$REPS" -o jsonl >"$OUT/llama-bench-$t.jsonl" 2>"$OUT/llama-bench-$t.log"
  echo "$t: exit $?, lab wrote the GGUF in $((t1 - t0)) s, llama-bench took $(($(date +%s) - t1)) s" | tee -a "$OUT/summary.txt"
  rm -f "$WORK/$t.gguf"
done
cat "$OUT"/llama-bench-*.jsonl >"$OUT/llama-bench.jsonl"
