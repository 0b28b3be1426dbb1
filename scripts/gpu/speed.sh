#!/usr/bin/env bash
# Issue 28's run: the lab's speed beside PyTorch and llama.cpp, every figure measured in this call on
# this GPU — decode and prefill (`bench`), offload within a 5 GiB budget beside llama.cpp's -ngl
# sweep (`offload`), and loading BF16 safetensors warm and cold (`load`).
#   here (the build machine):
#     bash scripts/cuda/build-gpu-binary.sh
#     bash scripts/reference/llama_quantize.sh pack /tmp/llama.cpp.tar.xz
#     bash scripts/reference/llama_bench.sh build /tmp/llb /tmp/llama.cpp.tar.xz .gpu/llama-bench.xz
#     cargo test --release --features cuda --test gpu_kernels --no-run   # then xz the binary it names
#       into .gpu/gpu_kernels.xz (after source /opt/cuda13/env.sh)
#   there, in two calls to the same machine (llama-bench's 41 MB and the lab's binary do not travel
#   together under the 64 MiB a call carries; the second call must follow within the machine's idle
#   time, and what the first put in /tmp and .gpu stays):
#     carry .gpu/vram-lab.xz, .gpu/gpu_kernels.xz:   WAIT=30 bash scripts/gpu/speed.sh
#     carry .gpu/llama-bench.xz:                     touch /tmp/llama-ready; bash scripts/gpu/speed.sh
#   (again, to wait and pack, while it runs). ONLY="bench offload" runs only those.
# About 20 minutes on an H100: past one call's 10, run.sh keeps the commands going; call it again
# to wait and pack (WAIT seconds each time). The whole lab's run (`bash scripts/gpu/run.sh`, every
# stage, about 15 minutes) goes on a machine of its own: both would pass the 30 minutes one is held.
set -u
cd "$(dirname "$0")/../.."
L=.gpu/llama-bench.xz
specs=(
  "torch-bench=sh:python3 scripts/reference/pytorch_reference.py bench --out \$R/torch-bench.jsonl"
  # llama-bench comes with the second call.
  "llama-wait=sh:bash scripts/gpu/wait_for.sh /tmp/llama-ready 900"
  # Every layer on the GPU: the decode and prefill rows' llama.cpp column.
  "llama=sh:LLAMA_TYPES=bf16,q4_k_m bash scripts/reference/llama_bench.sh run /tmp/llw \$R/llama-cpp /tmp/vram-lab $L"
  # The -ngl sweep a 5 GiB budget allows (10 layers of 7B in BF16): the offload rows' llama.cpp.
  "llama_ngl=sh:LLAMA_TYPES=bf16 LLAMA_NGL=8,10 LLAMA_P=0 LLAMA_N=32 LLAMA_R=2 bash scripts/reference/llama_bench.sh run /tmp/llw \$R/llama-ngl /tmp/vram-lab $L"
  "bench=bench --precisions bf16,q4_k_m --variants graph,own --pytorch \$R/torch-bench.jsonl --llama-cpp \$R/llama-cpp/llama-bench.jsonl"
  "offload=offload --gpu-budget 5GiB --modes full,split,hybrid --llama-cpp \$R/llama-ngl/llama-bench.jsonl"
  "load=load --precisions bf16 --no-gguf"
  # The kernel tests (.gpu/gpu_kernels.xz: cargo test --release --features cuda --test gpu_kernels
  # --no-run), and where the 32k prefill's time goes (ncu: the attention and the products).
  "kernels=sh:bash scripts/gpu/test_binary.sh .gpu/gpu_kernels.xz"
  "prefill-profile=sh:OUT=\$R/prefill-profile bash scripts/gpu/profile-prefill.sh && python3 scripts/gpu/ncu_sum.py \$R/prefill-profile/ncu.csv"
)
picked=()
for s in "${specs[@]}"; do
  name=${s%%=*}
  if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]]; then picked+=("$s"); fi
done
REPORTS=${REPORTS:-1} WAIT=${WAIT:-560} bash scripts/gpu/run.sh "${picked[@]}"
