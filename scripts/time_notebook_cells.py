"""Times each code cell of notebooks run Live on the CPU as `scripts/run_notebooks.py ci` runs them (one kernel a
notebook, one evcxr project for all, VRAM_LAB_EVCXR_DIR as in CI), and names the cargo units evcxr compiled during
each notebook (their fingerprint folders touched). One JSON line a notebook.

    VRAM_LAB_EVCXR_DIR=~/.cache/vram-lab/evcxr/lane-0 .venv/bin/python scripts/time_notebook_cells.py 00_setup.ipynb 02_kv_cache.ipynb
"""
import json
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_notebooks as rn  # noqa: E402

rn.evcxr_env()
fingerprints = Path(os.environ["EVCXR_TMPDIR"]) / "target" / "x86_64-unknown-linux-gnu" / "debug" / ".fingerprint"
for k in [k for k in os.environ if k.startswith("VRAM_LAB_NOTEBOOK_") or k == "VRAM_LAB_BIN"]:
    del os.environ[k]
os.environ.update(rn.LIVE)
for name in sys.argv[1:]:
    nb = nbformat.read(rn.NB_DIR / name, as_version=4)
    t0 = time.time()
    client = NotebookClient(nb, timeout=1800, kernel_name="rust", resources={"metadata": {"path": str(rn.NB_DIR)}})
    cells = []
    with client.setup_kernel():
        start = time.time() - t0
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                c0 = time.time()
                client.execute_cell(cell, i)
                cells.append((round(time.time() - c0, 1), cell.source.split("\n")[0][:50]))
    built = sorted({d.name.rsplit("-", 1)[0] for d in fingerprints.iterdir() if d.stat().st_mtime > t0}) \
        if fingerprints.exists() else []
    print(json.dumps({"notebook": name, "total_s": round(time.time() - t0, 1), "kernel_start_s": round(start, 1),
                      "cells": cells, "units_built": built}, ensure_ascii=False), flush=True)
