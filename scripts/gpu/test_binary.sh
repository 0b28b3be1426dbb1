#!/usr/bin/env bash
# Runs a GPU test binary carried xz-compressed in .gpu/ (built here with
#   cargo test --release --features nccl --test NAME --no-run
# and packed with xz): one test at a time, every test's output shown.
#   bash scripts/gpu/test_binary.sh .gpu/gpu_parallel.xz [test filter]
set -u
cd "$(dirname "$0")/../.."
bin=/tmp/$(basename "$1" .xz)
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$bin"
chmod +x "$bin"
source scripts/cuda/gpu-env.sh
shift
timeout 300 "$bin" --test-threads 1 --nocapture "$@"
