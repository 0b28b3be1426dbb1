#!/usr/bin/env bash
# Several GPUs of one host in one call: tensor-parallel inference over every GPU (7B, 14B, 32B, each
# beside the whole model on one GPU), data-parallel training steps (DDP, ZeRO-1, ZeRO-2 of 0.5B and
# 1.5B) and two unequal cards (24 GiB + 16 GiB emulated: the planner's micro-batches, then an even
# split). Every rank's bytes beside the ledger; NCCL logs its channels and allocations
# (NCCL_DEBUG_SUBSYS=INIT,ALLOC) into each command's stdout.
# On more than two GPUs the 7B, 72B and 1.5B runs are made over two of them as well (-g2).
#   FEATURES=nccl bash scripts/cuda/build-gpu-binary.sh     (here, on the build machine)
#   bash scripts/gpu/multi_gpu.sh                           (there; results as scripts/gpu/run.sh packs them)
# ONLY="tp14 ddp" runs only the named commands.
set -u
cd "$(dirname "$0")/../.."
# NVLink multicast stays off on shared hosts (a program using it can take the GPUs out of service).
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ALLOC
N=${GPUS:-$(nvidia-smi -L | wc -l)}
mkdir -p /tmp/results
nvidia-smi topo -m > /tmp/results/topo.txt 2>&1
train() { echo "train --model synthetic:qwen2.5-$1 --gpus $N --zero $2 --seq 512 --checkpointing false"; }
specs=(
  "tp14=parallel --model synthetic:qwen2.5-14b --gpus $N"
  # F32: the layouts' greedy tokens beside one GPU's without BF16's rounding of the partial sums.
  "tp7f32=parallel --model synthetic:qwen2.5-7b --precision f32 --gpus $N"
  "tp32=parallel --model synthetic:qwen2.5-32b --gpus $N"
  # 72B in BF16 (about 145 GB): a rank of two holds about 75 GB; one GPU alone runs out of memory
  # unless it is an H200 — the stage reports either as a value.
  "tp72=parallel --model synthetic:qwen2.5-72b --gpus $N"
  "zero0-1.5b=$(train 1.5b 0)" "zero1-1.5b=$(train 1.5b 1)" "zero2-1.5b=$(train 1.5b 2)"
  "cards-0.5b=train --model synthetic:qwen2.5-0.5b --cards 24GiB,16GiB --seq 256 --checkpointing true"
  "zero0-0.5b=$(train 0.5b 0)" "zero1-0.5b=$(train 0.5b 1)" "zero2-0.5b=$(train 0.5b 2)"
  # NCCL_LOG=ALL: every NCCL subsystem's log here (its buffers per channel and peer, what the
  # ledger's NCCL row counts; 12,000 lines).
  "tp7=sh:NCCL_DEBUG_SUBSYS=${NCCL_LOG:-INIT,ALLOC} timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --gpus $N --quiet --out \$R/tp7"
)
# More than two GPUs: the same layouts over two of them too, in the same call, so decode over 1, 2
# and N GPUs and the ZeRO formulas at 2 and N stand side by side (tokens in F32 equal to one GPU's
# at every N). Names end in -g2.
if [ "$N" -gt 2 ]; then
  specs+=(
    "tp7f32-g2=parallel --model synthetic:qwen2.5-7b --precision f32 --gpus 2"
    "tp7-g2=parallel --model synthetic:qwen2.5-7b --gpus 2"
    "tp72-g2=parallel --model synthetic:qwen2.5-72b --gpus 2 --no-single"
  )
  for z in 0 1 2; do specs+=("zero$z-1.5b-g2=$(train 1.5b $z | sed "s/--gpus $N/--gpus 2/")"); done
fi
# The GPU test binaries carried in .gpu/ (cargo test --release --features nccl --test gpu_parallel
# --no-run, xz-compressed): a pipeline over two GPUs equal to one GPU to the bit.
for t in .gpu/gpu_*.xz; do
  [ -e "$t" ] || continue
  b=$(basename "$t" .xz)
  specs+=("test-$b=sh:bash scripts/gpu/test_binary.sh $t")
done
REPORTS=0 TIMEOUT=${TIMEOUT:-150} WAIT=${WAIT:-400} bash scripts/gpu/run.sh "${specs[@]}"
