#!/usr/bin/env bash
# The notebooks Live on a GPU machine without a Rust toolchain: runs the program that
# scripts/notebook_program.py made of their code cells (.gpu/notebooks_live.xz, built with
# `cargo build --release --features cuda --example notebooks_live`) once per notebook, in
# notebooks/ as Jupyter would, with the lab's notebook API in Live mode on the GPU. Each notebook's
# stdout goes to $R/notebooks/<name>.out (`scripts/notebook_program.py merge` puts it back into the
# notebook) and the exit status of each is logged; any failure makes the script fail. Each Live
# stage runs .gpu/vram-lab.xz (scripts/cuda/build-gpu-binary.sh), the commit in .gpu/commit.
#   R=/tmp/results bash scripts/gpu/notebooks_live.sh [01_anatomy ...]
set -u
cd "$(dirname "$0")/../.."
R=${R:-/tmp/results}
mkdir -p "$R/notebooks"
bin=/tmp/notebooks_live
# Unpacked once: several of these scripts may run at once, one per GPU (notebooks_four_gpus.sh).
if [ ! -x "$bin" ]; then
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/notebooks_live.xz'), open('$bin','wb'))"
  chmod +x "$bin"
fi
# A Live stage runs the lab's own binary (src/notebook/live.rs), shipped beside the program.
if [ ! -x /tmp/vram-lab ]; then
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/vram-lab.xz'), open('/tmp/vram-lab','wb'))"
  chmod +x /tmp/vram-lab
fi
export VRAM_LAB_BIN=/tmp/vram-lab VRAM_LAB_COMMIT=$(cat .gpu/commit 2>/dev/null || echo unknown)
source scripts/cuda/gpu-env.sh
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(ls notebooks/ | sed -n 's/^\([0-9][0-9]_.*\)\.ipynb$/\1/p'))
status=0
for nb in "${names[@]}"; do
  start=$(date +%s)
  (cd notebooks && EVCXR_IS_RUNTIME=1 VRAM_LAB_HOME="$PWD/.." VRAM_LAB_NOTEBOOK_MODE=live VRAM_LAB_NOTEBOOK_DEVICE=cuda \
     "$bin" "$nb" > "$R/notebooks/$nb.out" 2> "$R/notebooks/$nb.err")
  rc=$?
  echo "notebook $nb: exit $rc in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || status=1
done
# The run folders the Live stages wrote (report.html left out by run.sh's packing): the evidence.
mkdir -p "$R/notebook-runs" && cp -r target/notebook-runs/. "$R/notebook-runs/" 2>/dev/null
exit $status
