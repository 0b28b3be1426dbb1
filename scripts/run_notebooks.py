"""Executes the notebooks with the evcxr kernel, headless, and fails on any cell error.

    .venv/bin/python scripts/run_notebooks.py render        # replay mode, outputs written into notebooks/ (committed)
    .venv/bin/python scripts/run_notebooks.py ci            # the committed ones must carry outputs; then copies, live on CPU
                                                            # (the tiny model on the scaled card), into target/notebooks-ci/ (Replay: cargo test),
                                                            # in one lane a core, each lane a kernel and an evcxr project of its own

The .ipynb files are the source people edit in JupyterLab; `render` re-executes them in place.

The kernel runs in notebooks/ so `:dep vram-lab = { path = ".." }` finds the crate. A lane of `ci` runs its notebooks
in one kernel, one after another, with evcxr's `:clear` between them: each notebook starts with no variable, no
`use` and no dependency, as in a new kernel, while the lab's build and evcxr's analysis of its sources (about 25 s
a kernel: `:dep` and the first `let`) are made once a lane (data/results/cpu/2026-12-06-evcxr-cells/RUN.md).
"""
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
TARGET = ROOT / "target"


def evcxr_env(lane=None):
    # evcxr runs cargo in its own folder, outside the repository: the toolchain pinned here (rust-toolchain.toml)
    # is named so the cells and the lab build with the same rustc as everything else.
    with open(ROOT / "rust-toolchain.toml", "rb") as f:
        os.environ["RUSTUP_TOOLCHAIN"] = tomllib.load(f)["toolchain"]["channel"]
    # VRAM_LAB_EVCXR_DIR (set by .ci/run): evcxr's project and build folder live there, outside the clone, so a
    # machine kept between runs builds the notebooks' dependencies once; only the lab and the cells are compiled
    # again. A fresh machine builds them there as it would under target/. Each lane of `ci` has its own folder:
    # evcxr's project must never be shared by two kernels at once.
    shared = os.environ.get("VRAM_LAB_EVCXR_DIR")
    tmp = Path(shared) if shared else TARGET / "evcxr-tmp"
    cfg = TARGET / "evcxr-config"
    if lane is not None:
        tmp, cfg = tmp / f"lane-{lane}", cfg / f"lane-{lane}"
    tmp.mkdir(parents=True, exist_ok=True)
    cfg.mkdir(parents=True, exist_ok=True)
    if shared:
        # The cells' libraries find Rust's std through a path relative to the build folder, one level off where
        # evcxr loads them from; under the toolchain's own home (rustup's in ~) it misses.
        libdir = subprocess.run(["rustc", "--print", "target-libdir"], capture_output=True, text=True, check=True).stdout.strip()
        os.environ["LD_LIBRARY_PATH"] = ":".join(p for p in [libdir, os.environ.get("LD_LIBRARY_PATH")] if p)
        # The lab and the exercises are compiled anew from each clone: their earlier builds are dropped so the
        # folder keeps only the dependencies (and does not grow by 65 MB a run).
        built = tmp / "target" / "x86_64-unknown-linux-gnu" / "debug"
        for pattern in ["deps/*vram_lab-*", "deps/*exercises-*", ".fingerprint/vram-lab-*", ".fingerprint/exercises-*",
                        "incremental/vram_lab-*", "incremental/exercises-*"]:
            for old in built.glob(pattern):
                shutil.rmtree(old) if old.is_dir() else old.unlink()
    # evcxr writes its project's own .cargo/config.toml and Cargo.toml (`:opt 0`: every crate unoptimised); a cell
    # is a crate that links the lab and every dependency statically, about 2 s each
    # (data/results/cpu/2026-12-06-evcxr-cells/RUN.md), linked by mold where it is installed. No `:cache`: with
    # evcxr's rustc cache on, cargo recompiled 28 crates with build scripts at every cell (docs/ci.md).
    init = ":opt 0\n" + (":linker mold\n" if shutil.which("mold") else "")
    (cfg / "init.evcxr").write_text(init)
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


def execute(path, env, out_path, km=None):
    """Runs one notebook, in a kernel of its own, or in `km` (a lane's kernel: cleared first, left running)."""
    # Each execution sees only its own settings: a live run's model must not leak into a replay.
    for k in [k for k in os.environ if k.startswith("VRAM_LAB_NOTEBOOK_") or k == "VRAM_LAB_BIN"]:
        del os.environ[k]
    os.environ.update(env)
    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    if km is not None and km.has_kernel:
        clear = NotebookClient(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(":clear")]), km=km, timeout=60)
        clear.execute()
        clear.kc.stop_channels()
        # `:clear` restarted evcxr's child process: the cells' libraries it had loaded (tens of MB each, one a cell,
        # never removed by evcxr) are no longer in use.
        for lib in (Path(os.environ["EVCXR_TMPDIR"]) / "target" / "x86_64-unknown-linux-gnu" / "debug").glob("libcode_*.so"):
            lib.unlink()
    client = NotebookClient(nb, km=km, timeout=1800, kernel_name="rust", record_timing=False,
                            resources={"metadata": {"path": str(NB_DIR)}})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        client.execute()
    finally:  # the executed cells, the failing one's error included
        if km is not None and client.kc is not None:
            client.kc.stop_channels()
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


def code_cells(path):
    return sum(1 for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")


def lanes_of(notebooks, n):
    """The notebooks dealt to n lanes, the largest first to the lane with the fewest code cells (a cell costs
    about the same everywhere: evcxr compiles it)."""
    lanes = [[] for _ in range(n)]
    load = [0] * n
    for nb in sorted(notebooks, key=code_cells, reverse=True):
        i = load.index(min(load))
        lanes[i].append(nb)
        load[i] += code_cells(nb)
    return [sorted(lane) for lane in lanes if lane]


def run(runs, one_kernel=False):
    """Runs each notebook, each in a new kernel, or (`one_kernel`, a lane of `ci`) all in one kernel cleared
    between them, a new one only after a failure."""
    failed = 0
    km = None
    try:
        for src, env, out in runs:
            mode = env["VRAM_LAB_NOTEBOOK_MODE"]
            if one_kernel and km is None:
                km = KernelManager(kernel_name="rust")
            try:
                secs = execute(src, env, out, km)
                print(f"notebook {src.name} ({mode}): executed without error in {secs:.0f} s -> {out.relative_to(ROOT)}", flush=True)
            except Exception as e:  # a cell error: report it, with the kernel's message, and fail the run
                failed += 1
                print(f"notebook {src.name} ({mode}): FAILED\n{e}\n{error_outputs(out)}", flush=True)
                if km is not None:  # the next notebook gets a new kernel, whatever this one left
                    if km.has_kernel:
                        km.shutdown_kernel(now=True)
                    km = None
    finally:
        if km is not None and km.has_kernel:
            km.shutdown_kernel(now=True)
    return failed


# Live on the CPU takes the command's defaults there (the tiny model on the scaled card): the report's story, each
# sweep stopped by its OOM (data/results/cpu/2026-11-26-course/RUN.md). Live runs the command itself
# (src/notebook/live.rs): the binary the main job built.
LIVE = {"VRAM_LAB_NOTEBOOK_MODE": "live", "VRAM_LAB_NOTEBOOK_DEVICE": "cpu",
        "VRAM_LAB_BIN": str(TARGET / "debug" / "vram-lab")}


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "ci"
    notebooks = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
    start = time.time()
    if what == "ci-lane":  # one lane of `ci`: its own evcxr project, its notebooks one after another
        evcxr_env(lane=int(sys.argv[2]))
        names = set(sys.argv[3:])
        failed = run([(nb, LIVE, TARGET / "notebooks-ci" / "live" / nb.name) for nb in notebooks if nb.name in names],
                     one_kernel=True)
        sys.exit(1 if failed else 0)
    if len(sys.argv) > 2:  # only the notebooks whose names contain this
        notebooks = [n for n in notebooks if sys.argv[2] in n.name]
    if what == "render":
        evcxr_env()
        failed = run([(nb, {"VRAM_LAB_NOTEBOOK_MODE": "replay"}, nb) for nb in notebooks], one_kernel=True)
        print(f"notebooks: {len(notebooks) - failed} passed, {failed} failed ({time.time() - start:.0f} s)")
        sys.exit(1 if failed else 0)
    if what != "ci":
        sys.exit(f"unknown mode {what}: use render or ci")
    bare = [(nb.name, why) for nb in notebooks if (why := missing_outputs(nb))]
    for name, why in bare:
        print(f"notebook {name}: committed without outputs ({why}); run `scripts/run_notebooks.py render` and commit", flush=True)
    if bare:
        sys.exit(1)
    # Every notebook runs Live, in as many lanes as there are cores (two on the CI kind), each lane a kernel of its
    # own: a cell is mostly one rustc and one link on one core. Replay is checked by `cargo test`
    # (tests/notebook_program.rs runs the notebooks' code as a program over the committed runs).
    lanes = lanes_of(notebooks, max(1, min(int(os.environ.get("VRAM_LAB_NOTEBOOK_LANES", os.cpu_count() or 1)), 4)))
    procs = [subprocess.Popen([sys.executable, __file__, "ci-lane", str(i), *(nb.name for nb in lane)])
             for i, lane in enumerate(lanes)]
    codes = [p.wait() for p in procs]
    failed_lanes = sum(1 for c in codes if c != 0)
    print(f"notebooks: {len(lanes)} lanes ({', '.join(' '.join(nb.name[:2] for nb in lane) for lane in lanes)}), "
          f"{failed_lanes} failed ({time.time() - start:.0f} s)")
    sys.exit(1 if failed_lanes else 0)


if __name__ == "__main__":
    main()
