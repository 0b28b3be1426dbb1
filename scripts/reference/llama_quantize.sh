#!/usr/bin/env bash
# llama.cpp's own llama-quantize beside `vram-lab quantize`, on the same synthetic model: the GGUF
# each writes, compared tensor by tensor (type and bytes) with llama.cpp's own GGUF reader (gguf-py).
#
#   scripts/reference/llama_quantize.sh pack   TARBALL            # llama.cpp's source, trimmed, to carry
#   scripts/reference/llama_quantize.sh build  WORK [TARBALL]     # llama-quantize for CPU
#   scripts/reference/llama_quantize.sh run    WORK OUT LAB [PRESET] [TYPE]
#   scripts/reference/llama_quantize.sh compare WORK OUT [TYPE]      # run's last step alone
#
# llama.cpp comes from the llama-cpp-python sdist on PyPI (it vendors llama.cpp; no other network).
# A machine without network (the lent GPU machine: CMake, numpy and PyYAML installed) builds from
# the tarball `pack` makes here: the sdist's llama.cpp without docs, models, tests and the GPU
# backends other than CUDA (5 MB), carried in an ignored folder.
# `run` writes the preset as a BF16 GGUF with the lab (vectors in F32, as llama.cpp's converter
# writes them), quantizes that file with llama-quantize and with `vram-lab quantize --type`, and
# writes OUT/tensors.csv (every tensor: llama.cpp's type and bytes, the lab's, same data or not),
# OUT/summary.txt and both tools' logs. The big files stay in WORK and are removed at the end.
set -euo pipefail
cmd=$1 WORK=$(realpath -m "$2")
SDIST_VERSION=0.3.36
SRC=$WORK/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp
# Here a venv of our own; where one cannot be made (no network), the machine's python3 and cmake.
PY=$WORK/venv/bin/python
CMAKE=$WORK/venv/bin/cmake
[ -x "$PY" ] || PY=python3
[ -x "$CMAKE" ] || CMAKE=cmake

sdist() {
  [ -x "$WORK/venv/bin/python" ] || python3 -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install --quiet cmake numpy pyyaml  # gguf-py reads GGUF with numpy, imports yaml
  PY=$WORK/venv/bin/python CMAKE=$WORK/venv/bin/cmake
  [ -d "$SRC" ] || {
    "$WORK/venv/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$SDIST_VERSION" -d "$WORK"
    tar xzf "$WORK/llama_cpp_python-$SDIST_VERSION.tar.gz" -C "$WORK"
  }
}

if [ "$cmd" = pack ]; then
  TARBALL=$WORK
  WORK=$(mktemp -d) SRC=$WORK/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp
  sdist
  commit=$(cat "$WORK/llama_cpp_python-$SDIST_VERSION/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || echo unknown)
  echo "$commit" > "$SRC/VENDORED_BY_LLAMA_CPP_PYTHON_$SDIST_VERSION"
  x=(docs models tests benches media tools/ui 'tools/server/public*')
  for b in et metal hexagon sycl vulkan opencl cann musa webgpu; do x+=("ggml/src/ggml-$b"); done
  mkdir -p "$(dirname "$TARBALL")"
  tar cJf "$TARBALL" -C "$(dirname "$SRC")" "${x[@]/#/--exclude=llama.cpp/}" llama.cpp
  rm -rf "$WORK"
  ls -la "$TARBALL"
  exit 0
fi
mkdir -p "$WORK"

if [ "$cmd" = build ]; then
  if [ -n "${3:-}" ]; then
    mkdir -p "$(dirname "$SRC")"
    [ -d "$SRC" ] || tar xJf "$3" -C "$(dirname "$SRC")"
  else
    sdist
  fi
  "$CMAKE" -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF >"$WORK/cmake.log"
  "$CMAKE" --build "$WORK/build" --target llama-quantize -j "$(nproc)" >"$WORK/build.log"
  ls -la "$WORK/build/bin/llama-quantize"
  exit 0
fi

OUT=$(realpath -m "$3")
mkdir -p "$OUT"

if [ "$cmd" = run ]; then
  LAB=$(realpath "$4") PRESET=${5:-qwen2.5-7b} TYPE=${6:-q4_k_m}
  t0=$(date +%s)
  "$LAB" quantize --quiet --model "synthetic:$PRESET" --type bf16 --to "$WORK/in-bf16.gguf" | tee "$OUT/lab-bf16.log"
  t1=$(date +%s)
  "$WORK/build/bin/llama-quantize" "$WORK/in-bf16.gguf" "$WORK/llama-$TYPE.gguf" "$(echo "$TYPE" | tr a-z A-Z)" "$(nproc)" >"$OUT/llama-quantize.log" 2>&1
  t2=$(date +%s)
  # From the same BF16 file llama-quantize reads, so the quantizers see the same values.
  "$LAB" quantize --quiet --model "$WORK/in-bf16.gguf" --type "$TYPE" --to "$WORK/lab-$TYPE.gguf" | tee "$OUT/lab-$TYPE.log"
  t3=$(date +%s)
  echo "seconds: lab bf16 $((t1 - t0)), llama-quantize $((t2 - t1)), lab $TYPE $((t3 - t2))" >"$OUT/seconds.txt"
  bash "$0" compare "$WORK" "$OUT" "$TYPE"
  exit $?
fi

# compare
TYPE=${4:-q4_k_m}
echo "llama.cpp: vendored by llama-cpp-python $SDIST_VERSION, commit $( (cat "$WORK/llama_cpp_python-$SDIST_VERSION/.git/modules/vendor/llama.cpp/HEAD" "$SRC/VENDORED_BY_LLAMA_CPP_PYTHON_$SDIST_VERSION" 2>/dev/null || true) | head -1)" >"$OUT/summary.txt"
set +e
PYTHONPATH="$SRC/gguf-py" "$PY" - "$WORK/llama-$TYPE.gguf" "$WORK/lab-$TYPE.gguf" "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import csv, sys
from gguf import GGUFReader
llama, lab, out = GGUFReader(sys.argv[1]), GGUFReader(sys.argv[2]), sys.argv[3]
a = {t.name: t for t in llama.tensors}
b = {t.name: t for t in lab.tensors}
rows, differ = [], 0
for name in sorted(set(a) | set(b)):
    ta, tb = a.get(name), b.get(name)
    row = [name, ta.tensor_type.name if ta else "", int(ta.n_bytes) if ta else 0, tb.tensor_type.name if tb else "", int(tb.n_bytes) if tb else 0]
    differ += row[1] != row[3] or row[2] != row[4]
    # Whether the quantizers agree to the bit, not only the types (candle's k-quants port ggml's reference).
    row.append(bool(ta and tb and ta.data.tobytes() == tb.data.tobytes()))
    rows.append(row)
with open(f"{out}/tensors.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["tensor", "llama_cpp_type", "llama_cpp_bytes", "lab_type", "lab_bytes", "same_data"])
    w.writerows(rows)
sa, sb = sum(r[2] for r in rows), sum(r[4] for r in rows)
by = {}
for r in rows:
    by.setdefault(r[1], [0, 0])[0] += 1
    by[r[1]][1] += r[2]
print(f"tensors: llama.cpp {len(a)}, lab {len(b)}; tensor bytes: llama.cpp {sa:,}, lab {sb:,}; tensors that differ in type or bytes: {differ}")
print(f"tensors whose data are the same to the bit: {sum(r[5] for r in rows)} of {len(rows)}")
import os
print(f"file sizes: llama.cpp {os.path.getsize(sys.argv[1]):,} B, lab {os.path.getsize(sys.argv[2]):,} B")
print("llama.cpp by type: " + ", ".join(f"{t} {n} tensors {b:,} B" for t, (n, b) in sorted(by.items())))
sys.exit(1 if differ or sa != sb else 0)
PY
status=${PIPESTATUS[0]}
# 25 GB of files: removed when they agree (kept to look at when they differ or could not be read).
[ "$status" -ne 0 ] || rm -f "$WORK/in-bf16.gguf" "$WORK/llama-$TYPE.gguf" "$WORK/lab-$TYPE.gguf"
exit $status
