#!/usr/bin/env bash
# Why the compute-8.9 and 9.0 builds round BF16 differently, shown without a GPU: candle's rotary
# (reduce.cu) and affine kernels compiled to PTX for compute 8.9 and 9.0, each assembled for sm_90
# (as the H200's driver does with either build's PTX), and the BF16 arithmetic of rope_bf16 and
# affine_bf16 disassembled. CUDA's cuda_bf16.hpp spells a BF16 multiply `mul.bf16` at 9.0 (no
# rounding modifier, so ptxas may fuse it into the next add) and `fma.rn.bf16 a, b, -0` below 9.0
# (never fused).
#   bash scripts/cuda/setup-cuda-build.sh; bash scripts/cuda/bf16_rounding.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bf16_rounding.sh OUT_DIR}
mkdir -p "$OUT"
source /opt/cuda13/env.sh
K=$(cargo metadata --format-version 1 --features cuda | python3 -c "import json,sys,os; print([os.path.dirname(p['manifest_path']) for p in json.load(sys.stdin)['packages'] if p['name']=='candle-kernels'][0])")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# nvdisasm is not in the build toolchain's wheels: NVIDIA's own wheel, unpacked here only.
python3 -m pip download --quiet --no-deps "nvidia-cuda-nvdisasm==13.2.78" -d "$tmp" >/dev/null
python3 -m zipfile -e "$tmp"/nvidia_cuda_nvdisasm-*.whl "$tmp/nvd"
nvdisasm="$tmp/nvd/nvidia/cu13/bin/nvdisasm"
chmod +x "$nvdisasm"
{
  echo "# nvcc: $(nvcc --version | tail -1); ptxas -arch=sm_90; $("$nvdisasm" --version | tail -1)"
  echo "# candle-kernels: $K"
  for f in reduce affine; do
    for cc in 89 90; do
      nvcc -ptx -arch=compute_$cc -I"$K/src" "$K/src/$f.cu" -o "$tmp/$f-$cc.ptx" 2>/dev/null
      ptxas -arch=sm_90 "$tmp/$f-$cc.ptx" -o "$tmp/$f-$cc.cubin"
      "$nvdisasm" "$tmp/$f-$cc.cubin" >"$tmp/$f-$cc.sass"
    done
  done
  for fn in reduce:rope_bf16 affine:affine_bf16; do
    f=${fn%%:*}; k=${fn#*:}
    for cc in 89 90; do
      echo
      echo "## $k, PTX for compute $cc: its BF16 arithmetic in the PTX, then in the sm_90 machine code"
      awk -v e=".entry $k(" 'index($0, e){f=1} f&&/^}/{exit} f' "$tmp/$f-$cc.ptx" | grep -E "(mul|add|sub|fma)(\.rn)?\.bf16" | sed 's/^[ \t]*/  ptx:  /'
      awk -v e=".text.$k:" 'index($0, e)==1{f=1; next} f&&/^\.text\./{exit} f' "$tmp/$f-$cc.sass" |
        grep -oE "(HFMA2|HMUL2|HADD2)\.[A-Z0-9_.]+ [^;]*" | grep -v -- "-RZ, RZ" | sed 's/^/  sass: /'
    done
  done
} | tee "$OUT/bf16_rounding.txt"
