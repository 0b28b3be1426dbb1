#!/usr/bin/env bash
# GPU runs on a machine without a Rust toolchain:
#   bash scripts/gpu/run.sh ["NAME=vram-lab arguments" ...]      (default: "run=run")
# e.g. bash scripts/gpu/run.sh "run=run" "kv-alone=kv --precisions bf16 --sweeps prefill --logits all"
# A spec "NAME=sh:COMMAND" runs a shell command instead (the PyTorch reference script, say), with
# $R (the results folder) set, its output in $R/NAME.stdout.txt:
#   "torch-frag=sh:python3 scripts/reference/pytorch_reference.py frag --card 24084.5 --out \$R/torch-frag.jsonl"
# ONLY="NAME ..." runs only those specs (a name, or a name's part before its first dash).
# TIMEOUT=SECONDS stops each vram-lab command after that long (exit 124): a group of GPUs blocked
# in a collective that one rank never joins cannot hold the whole call.
# Expects .gpu/vram-lab.xz (made by scripts/cuda/build-gpu-binary.sh). Runs each command in turn,
# `--quiet --out $R/NAME` added, in a process session of its own (so the runs outlive a shell that
# is cut off); waits up to WAIT seconds (default 560) and packs what exists into
# $OUT/results.tar.gz: one run folder per command (manifest.json, CSVs; each report.html beside it
# as $OUT/NAME-report.html.xz), each
# command's stdout, nvidia-smi, the binary's info and this log. Called again while the runs go
# on, it only waits and packs.
set -u
R=/tmp/results
OUT=${OUT:-/tmp/out}
WAIT=${WAIT:-560}
mkdir -p "$R" "$OUT"
exec > >(tee -a "$R/log.txt") 2>&1
if [ ! -x /tmp/vram-lab ]; then
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
  chmod +x /tmp/vram-lab
fi
source scripts/cuda/gpu-env.sh
if [ ! -e "$R/started" ]; then
  nvidia-smi > "$R/nvidia-smi.txt" 2>&1
  date -u +%Y-%m-%dT%H:%M:%SZ > "$R/started"
  /tmp/vram-lab info --quiet > "$R/info.txt" 2>&1
  [ $# -gt 0 ] || set -- "run=run"
  # ONLY="tp14 ddp": only the specs of those names, or whose name before its first dash is one.
  if [ -n "${ONLY:-}" ]; then
    picked=()
    for spec in "$@"; do
      name=${spec%%=*}
      [[ " $ONLY " == *" ${name%%-*} "* || " $ONLY " == *" $name "* ]] && picked+=("$spec")
    done
    set -- "${picked[@]}"
  fi
  script=$R/commands.sh
  : > "$script"
  echo "export R=$R" >> "$script"
  for spec in "$@"; do
    name=${spec%%=*}; args=${spec#*=}
    if [ "${args#sh:}" != "$args" ]; then
      cmd=${args#sh:}
      echo "echo \"### \$(date -u +%H:%M:%S) $name: $cmd\"" >> "$script"
      echo "$cmd > $R/$name.stdout.txt 2>&1; echo \"### $name exit \$?\"" >> "$script"
    else
      echo "echo \"### \$(date -u +%H:%M:%S) $name: vram-lab $args --quiet --out $R/$name\"" >> "$script"
      echo "${TIMEOUT:+timeout $TIMEOUT }/tmp/vram-lab $args --quiet --out $R/$name > $R/$name.stdout.txt 2>&1; echo \"### $name exit \$?\"" >> "$script"
    fi
  done
  echo "touch $R/done" >> "$script"
  cat "$script"
  setsid bash "$script" >> "$R/progress.txt" 2>&1 &
fi
t0=$SECONDS
while [ ! -e "$R/done" ] && [ $((SECONDS - t0)) -lt "$WAIT" ]; do sleep 5; done
cat "$R/progress.txt"
[ -e "$R/done" ] || echo "### still running after ${WAIT} s: call again"
# report.html embeds plotly (MBs each): packed apart, xz-compressed, so the results come back whole.
tar czf "$OUT/results.tar.gz" --exclude=report.html -C /tmp results
# REPORTS=0 leaves them out (at most 8 files come back from a call; `vram-lab report DIR` renders one again).
[ "${REPORTS:-1}" = 1 ] && for f in "$R"/*/report.html; do
  [ -e "$f" ] && python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.compress(open(sys.argv[1],'rb').read(), preset=9))" "$f" "$OUT/$(basename "$(dirname "$f")")-report.html.xz"
done
ls -la "$OUT"
