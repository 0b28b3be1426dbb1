#!/usr/bin/env bash
# Installs what the notebooks need on a fresh machine: the evcxr Rust kernel (from crates.io) and
# nbconvert/nbclient (from PyPI, in .venv). `--lab` adds JupyterLab and its plotly renderer for
# interactive use (AutoDL images already have JupyterLab: the kernel alone is enough there).
set -euo pipefail
cd "$(dirname "$0")/.."
EVCXR_VERSION=0.22.0
if [ "$(evcxr_jupyter --version 2>/dev/null | awk '{print $2}')" != "$EVCXR_VERSION" ]; then
  cargo install evcxr_jupyter --version "$EVCXR_VERSION" --locked
fi
evcxr_jupyter --install
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --quiet nbconvert==7.17.2 nbclient==0.11.0 ipykernel
if [ "${1:-}" = "--lab" ]; then
  .venv/bin/pip install --quiet jupyterlab plotly
fi
echo "kernel: $(jupyter_dir=$(.venv/bin/jupyter --data-dir 2>/dev/null); ls -d ~/.local/share/jupyter/kernels/rust 2>/dev/null || echo missing)"
