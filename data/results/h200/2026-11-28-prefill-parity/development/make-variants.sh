#!/usr/bin/env bash
# Writes the kernels probe.cu compares into variants/ (ignored), from this repository's history:
# o_ is main's before this folder (73180b6); l1_ and sk_ are 6b22097's with the patches here (l1_:
# the copies issued before the products; sk_: the exponent change alone, the rescale skipped where
# no row's maximum moved). Each variant's kernels renamed with its prefix, so one file holds all.
#   bash make-variants.sh && nvcc -O3 -lineinfo -gencode arch=compute_90a,code=sm_90a -o pv probe.cu
set -eu
cd "$(dirname "$0")"
mkdir -p variants
show() { git show "$1:src/model/kernels/$2" | sed "s/vram_lab_flash_/$3vram_lab_flash_/g"; }
for f in flash_attention.cu flash_attention_sm90.cu; do
  show 73180b6 "$f" o_ > "variants/o_$f"
  show 6b22097 "$f" l1_ > "variants/l1_$f"
  show 6b22097 "$f" sk_ > "variants/sk_$f"
done
patch -s variants/l1_flash_attention_sm90.cu l1_flash_attention_sm90.patch
patch -s variants/sk_flash_attention.cu sk_flash_attention.patch
patch -s variants/sk_flash_attention_sm90.cu sk_flash_attention_sm90.patch
