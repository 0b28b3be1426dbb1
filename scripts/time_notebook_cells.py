"""Times each code cell of notebooks run Live on the CPU as one lane of `scripts/run_notebooks.py ci` runs them (one
kernel for all, evcxr's `:clear` before each notebook after the first, VRAM_LAB_EVCXR_DIR as in CI) and writes
one CSV row a cell: notebook, kernel (new or cleared), cell, seconds, first line. `--kernel-each` starts a new
kernel for each notebook instead, as a student's JupyterLab does.

    VRAM_LAB_EVCXR_DIR=~/.cache/vram-lab/evcxr/lane-0 .venv/bin/python scripts/time_notebook_cells.py cells.csv 00_setup.ipynb 02_kv_cache.ipynb
"""
import csv
import os
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_notebooks as rn  # noqa: E402


def main():
    args = sys.argv[1:]
    each = "--kernel-each" in args
    args = [a for a in args if a != "--kernel-each"]
    if len(args) < 2:
        sys.exit("usage: time_notebook_cells.py [--kernel-each] OUT.csv NOTEBOOK.ipynb...")
    out, names = Path(args[0]), args[1:]
    rn.evcxr_env()
    for k in [k for k in os.environ if k.startswith("VRAM_LAB_NOTEBOOK_") or k == "VRAM_LAB_BIN"]:
        del os.environ[k]
    os.environ.update(rn.LIVE)
    km = None
    rows = []
    try:
        for name in names:
            if each and km is not None:
                km.shutdown_kernel(now=True)
                km = None
            kernel = "new" if km is None else "cleared"
            if km is None:
                km = KernelManager(kernel_name="rust")
            nb = nbformat.read(rn.NB_DIR / name, as_version=4)
            if kernel == "cleared":
                nb.cells.insert(0, nbformat.v4.new_code_cell(":clear"))
            client = NotebookClient(nb, km=km, timeout=1800, kernel_name="rust",
                                    resources={"metadata": {"path": str(rn.NB_DIR)}})
            with client.setup_kernel():
                n = 0 if kernel == "cleared" else 1  # `:clear` is cell 0
                for i, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    c0 = time.time()
                    client.execute_cell(cell, i)
                    rows.append([name, kernel, n, round(time.time() - c0, 1), cell.source.split("\n")[0][:50]])
                    n += 1
                client.kc.stop_channels()
            print(f"{name} ({kernel} kernel): {sum(r[3] for r in rows if r[0] == name):.1f} s", flush=True)
    finally:
        if km is not None and km.has_kernel:
            km.shutdown_kernel(now=True)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["notebook", "kernel", "cell", "seconds", "first_line"])
        w.writerows(rows)


if __name__ == "__main__":
    main()
