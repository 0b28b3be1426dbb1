"""Executes the notebooks with the evcxr kernel, headless, and fails on any cell error.

    .venv/bin/python scripts/run_notebooks.py render        # replay mode, outputs written into notebooks/ (committed)
    .venv/bin/python scripts/run_notebooks.py ci            # the committed ones must carry outputs; then copies, live on CPU
                                                            # (the tiny model on the scaled card), into target/notebooks-ci/ (Replay: cargo test)

The .ipynb files are the source people edit in JupyterLab; `render` re-executes them in place.

The kernel runs in notebooks/ so `:dep vram-lab = { path = ".." }` finds the crate. All kernels share
one EVCXR_TMPDIR, one after another, so only the first notebook compiles the dependencies.
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
TARGET = ROOT / "target"


def evcxr_env():
    # VRAM_LAB_EVCXR_DIR (set by .ci/run): evcxr's project and build folder live there, outside the
    # clone, so a machine kept between runs builds the notebooks' dependencies once (a cold build of
    # them took 827 s on the 2-core CI kind, docs/build-time.md); only the lab and the cells are
    # compiled again. A fresh machine builds them there as it would under target/.
    # evcxr runs cargo in its own folder, outside the repository: the toolchain pinned here (rust-toolchain.toml)
    # is named so the cells and the lab build with the same rustc as everything else.
    pinned = (ROOT / "rust-toolchain.toml").read_text().split('channel = "', 1)[1].split('"', 1)[0]
    os.environ["RUSTUP_TOOLCHAIN"] = pinned
    shared = os.environ.get("VRAM_LAB_EVCXR_DIR")
    tmp = Path(shared) if shared else TARGET / "evcxr-tmp"
    cfg = TARGET / "evcxr-config"
    tmp.mkdir(parents=True, exist_ok=True)
    cfg.mkdir(parents=True, exist_ok=True)
    if shared:
        # Cargo finds the per-crate optimisation levels above the project it builds, as under target/.
        (tmp / ".cargo").mkdir(exist_ok=True)
        shutil.copyfile(ROOT / ".cargo" / "config.toml", tmp / ".cargo" / "config.toml")
        # The cells' libraries find Rust's std through a path relative to the build folder, one level
        # off where evcxr loads them from; under the toolchain's own home (rustup's in ~) it misses.
        libdir = subprocess.run(["rustc", "--print", "target-libdir"], capture_output=True, text=True, check=True).stdout.strip()
        os.environ["LD_LIBRARY_PATH"] = ":".join(p for p in [libdir, os.environ.get("LD_LIBRARY_PATH")] if p)
        # The lab and the exercises are compiled anew from each clone: their earlier builds are dropped
        # so the folder keeps only the dependencies (and does not grow by 65 MB a run).
        built = tmp / "target" / "x86_64-unknown-linux-gnu" / "debug"
        for pattern in ["deps/*vram_lab-*", "deps/*exercises-*", ".fingerprint/vram-lab-*", ".fingerprint/exercises-*",
                        "incremental/vram_lab-*", "incremental/exercises-*"]:
            for old in built.glob(pattern):
                shutil.rmtree(old) if old.is_dir() else old.unlink()
    # No `:cache`: with evcxr's rustc cache on, cargo recompiled 28 crates with build scripts at every
    # cell (answered from the cache, about 4 s a cell: 39 times for notebook 06's 38 cells); without it
    # the shared EVCXR_TMPDIR keeps them built and a cell takes 1-2 s (docs/ci.md).
    (cfg / "init.evcxr").write_text(":opt 0\n")
    os.environ["EVCXR_TMPDIR"] = str(tmp)
    os.environ["EVCXR_CONFIG_DIR"] = str(cfg)


def strip_volatile(nb):
    nb.metadata = {
        "kernelspec": {"display_name": "Rust", "language": "rust", "name": "rust"},
        "language_info": {"name": "rust", "file_extension": ".rs", "mimetype": "text/rust"},
    }
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def execute(path, env, out_path):
    # Each execution sees only its own settings: a live run's model must not leak into a replay.
    for k in [k for k in os.environ if k.startswith("VRAM_LAB_NOTEBOOK_") or k == "VRAM_LAB_BIN"]:
        del os.environ[k]
    os.environ.update(env)
    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    client = NotebookClient(nb, timeout=1800, kernel_name="rust", record_timing=False,
                            resources={"metadata": {"path": str(NB_DIR)}})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        client.execute()
    finally:  # the executed cells, the failing one's error included
        nbformat.write(strip_volatile(nb), out_path)
    # evcxr prints an error a cell returns with `?` on stderr without failing the cell: fail here.
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                raise RuntimeError(f"cell {cell.get('id')} wrote to stderr:\n{o.get('text')}")
    return time.time() - t0


def error_outputs(path):
    """The error outputs of an executed notebook, as text."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:
        return ""
    lines = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                lines.append(f"{o.get('ename')}: {o.get('evalue')}")
                lines.extend(o.get("traceback", []))
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                lines.append(f"stderr of cell {cell.get('id')}: {o.get('text')}")
    return "\n".join(lines)


SHOWS = (".show(", ".show_only(", ".chart(", "println!", "show_chart(")


def missing_outputs(path):
    """Why a committed notebook fails the check that readers see its figures, or None."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    empty = [c.get("id") for c in code if any(s in c.source for s in SHOWS) and not c.get("outputs")]
    if empty:
        return f"cells {', '.join(map(str, empty))} show something but have no outputs"
    if code and sum(1 for c in code if c.get("outputs")) * 2 < len(code):
        return "fewer than half of its code cells have outputs"
    # GitHub runs no JavaScript: every chart carries its static SVG beside plotly's JSON.
    bare = [c.get("id") for c in code for o in c.get("outputs", [])
            if "application/vnd.plotly.v1+json" in o.get("data", {}) and "image/svg+xml" not in o.get("data", {})]
    if bare:
        return f"charts of cells {', '.join(map(str, bare))} have no static SVG"
    return None


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "ci"
    evcxr_env()
    notebooks = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
    if len(sys.argv) > 2:  # only the notebooks whose names contain this
        notebooks = [n for n in notebooks if sys.argv[2] in n.name]
    start = time.time()
    runs = []
    if what == "render":
        runs = [(nb, {"VRAM_LAB_NOTEBOOK_MODE": "replay"}, nb) for nb in notebooks]
    elif what == "ci":
        bare = [(nb.name, why) for nb in notebooks if (why := missing_outputs(nb))]
        for name, why in bare:
            print(f"notebook {name}: committed without outputs ({why}); run `scripts/run_notebooks.py render` and commit", flush=True)
        if bare:
            sys.exit(1)
        # Live on the CPU takes the command's defaults there (the tiny model on the scaled card): the
        # report's story, each sweep stopped by its OOM (data/results/cpu/2026-11-26-course/RUN.md).
        live = {"VRAM_LAB_NOTEBOOK_MODE": "live", "VRAM_LAB_NOTEBOOK_DEVICE": "cpu",
                # Live runs the command itself (src/notebook/live.rs): the binary the main job built.
                "VRAM_LAB_BIN": str(TARGET / "debug" / "vram-lab")}
        # Replay is checked by `cargo test` (tests/notebook_program.rs runs the notebooks' code as a
        # program over the committed runs): an evcxr kernel costs about a minute per notebook.
        runs = [(nb, live, TARGET / "notebooks-ci" / "live" / nb.name) for nb in notebooks]
    else:
        sys.exit(f"unknown mode {what}: use render or ci")
    failed = 0
    for src, env, out in runs:
        mode = env["VRAM_LAB_NOTEBOOK_MODE"]
        try:
            secs = execute(src, env, out)
            print(f"notebook {src.name} ({mode}): executed without error in {secs:.0f} s -> {out.relative_to(ROOT)}", flush=True)
        except Exception as e:  # a cell error: report it, with the kernel's message, and fail the run
            failed += 1
            print(f"notebook {src.name} ({mode}): FAILED\n{e}\n{error_outputs(out)}", flush=True)
    total = time.time() - start
    print(f"notebooks: {len(runs) - failed} passed, {failed} failed ({total:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
