#!/usr/bin/env bash
# The course's card in one command, for a teaching assistant on the card itself (AutoDL: an RTX 4090,
# RTX 3090 or A4000). It builds the lab for the card's compute capability, then runs:
#   parity     each precision's logits beside F32's on the CPU (`vram-lab parity`): is the build right?
#   frag       the allocator stage beside PyTorch's own allocator, measured in the same run
#   notebooks  every notebook Live, as a student's Jupyter would run it
#   offload    the offload stage beside PyTorch + accelerate's device_map, in the same run
#   run        the whole lab (`vram-lab run`)
# It writes one folder: each figure beside its prediction and the committed emulation (an RTX 4090
# emulated on an H100), and ends with a short pass/fail summary to paste (summary.txt).
#   bash scripts/course-check.sh [FOLDER]          default: course-check-<date>; an existing one is refused
#   STEPS="parity frag" bash scripts/course-check.sh       only those steps
#   NOTEBOOKS="00_setup 03_allocator" ...                  only those notebooks (default: all)
#   CARD=rtx4090 ...   emulate that card (the rehearsal on a larger GPU); on the course's card leave it out
# Already built (the rehearsal on a machine without Rust): VRAM_LAB_BIN=path NOTEBOOKS_BIN=path.
# A build needs the CUDA toolkit (nvcc); it takes 10-20 minutes the first time.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-course-check-$(date +%Y-%m-%d)}
if [ -e "$OUT" ]; then
  echo "course-check: $OUT exists; name a new folder" >&2
  exit 2
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STEPS=${STEPS:-parity frag notebooks offload run}
CARD=${CARD:-}
exec > >(tee -a "$OUT/log.txt") 2>&1
want() { [[ " $STEPS " == *" $1 "* ]]; }
status() { echo "$1" >> "$OUT/steps.txt"; echo "### $1"; }

if ! nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv > "$OUT/gpu.csv"; then
  echo "course-check: nvidia-smi found no GPU" >&2
  exit 1
fi
cap=$(sed -n 2p "$OUT/gpu.csv" | cut -d, -f2 | tr -d ' .')
echo "GPU: $(sed -n 2p "$OUT/gpu.csv") (compute $cap)"

if [ -z "${VRAM_LAB_BIN:-}" ]; then
  echo "### building for compute $cap (the first build takes 10-20 minutes)"
  export CUDA_COMPUTE_CAP=$cap
  cargo build --release --features cuda || { status "build fail"; exit 1; }
  if want notebooks; then
    cargo build --release --features cuda --example notebooks_live || { status "build-notebooks fail"; exit 1; }
  fi
  VRAM_LAB_BIN=$PWD/target/release/vram-lab
  NOTEBOOKS_BIN=$PWD/target/release/examples/notebooks_live
fi
lab() { "$VRAM_LAB_BIN" "$@"; }
# The commit the notebooks' first output names: the binary's (given with it), else this checkout's.
export VRAM_LAB_COMMIT=${VRAM_LAB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
lab info --quiet > "$OUT/info.txt" 2>&1
card_args=()
[ -n "$CARD" ] && card_args=(--card "$CARD")

if want parity; then
  # 300 seeded prompt ids take BF16's flash-attention prefill; 48 positions of the static step.
  lab parity --model synthetic:qwen2.5-0.5b --json > "$OUT/parity.json" 2> "$OUT/parity.err"
  status "parity exit $?"
fi

# PyTorch's rows for a stage, measured just before it: the reference emulates the card as the lab
# does (a ballast leaves the card's MiB free). Sets torch_args for the stage's command.
torch_rows() {
  torch_args=()
  if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    status "torch-$1 skipped: no PyTorch with CUDA here"
    return
  fi
  local mib
  mib=$(lab info --quiet 2>/dev/null | sed -n "s/^ *${CARD:-none} *\([0-9.]*\) MiB.*/\1/p" | head -1)
  python3 scripts/reference/pytorch_reference.py "$@" ${mib:+--card "$mib"} --out "$OUT/torch-$1.jsonl" \
    > "$OUT/torch-$1.txt" 2>&1
  status "torch-$1 exit $?"
  torch_args=(--pytorch "$OUT/torch-$1.jsonl")
}

if want frag; then
  torch_rows frag
  lab frag --model synthetic:qwen2.5-7b "${card_args[@]}" "${torch_args[@]}" --quiet --out "$OUT/frag" \
    > "$OUT/frag.txt" 2>&1
  status "frag exit $?"
fi

if want notebooks; then
  mkdir -p "$OUT/notebooks"
  names=(${NOTEBOOKS:-$(ls notebooks/ | sed -n 's/^\([0-9][0-9]_.*\)\.ipynb$/\1/p')})
  for nb in "${names[@]}"; do
    start=$(date +%s)
    # The notebooks' code as one program (scripts/notebook_program.py), Live on this GPU; each Live
    # stage runs the binary above.
    (cd notebooks && EVCXR_IS_RUNTIME=1 VRAM_LAB_HOME="$PWD/.." VRAM_LAB_NOTEBOOK_MODE=live \
       VRAM_LAB_NOTEBOOK_DEVICE=cuda VRAM_LAB_BIN="$VRAM_LAB_BIN" "$NOTEBOOKS_BIN" "$nb" \
       > "$OUT/notebooks/$nb.out" 2> "$OUT/notebooks/$nb.err")
    status "notebook $nb exit $? in $(( $(date +%s) - start )) s"
  done
  # The run folders the Live stages wrote: the notebooks' evidence.
  cp -r target/notebook-runs "$OUT/notebook-runs" 2>/dev/null
fi

if want offload; then
  torch_rows offload --new-tokens 20
  lab offload --model synthetic:qwen2.5-7b "${card_args[@]}" "${torch_args[@]}" --quiet --out "$OUT/offload" \
    > "$OUT/offload.txt" 2>&1
  status "offload exit $?"
fi

if want run; then
  lab run "${card_args[@]}" --quiet --out "$OUT/run" > "$OUT/run.txt" 2>&1
  status "run exit $?"
fi

python3 scripts/course_compare.py "$OUT"
