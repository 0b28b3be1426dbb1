"""Compacts results folders to what the repository keeps: RUN.md (and any .md), the CSVs, each run
folder's manifest.json and env.json with the files its manifest names, and the files the lab's code
and tests read (one path a line in --keep, e.g. the files a traced `cargo test` opened). Everything
else (raw logs, profiler dumps, duplicate consoles, probe sources and patches) leaves the tree: the
RUN.md of each folder that lost files gets a line naming the commit that still holds them. A
profiler's CSV export (`ncu*.csv`) counts as a dump.

    python3 scripts/compact_results.py --commit <sha> [--keep FILE] data/results/h200/2026-12-06-name ...

A plain llama.cpp launch log (`launch-N.log`) that is kept is gzipped (`vram-lab check` reads both).
Prints what it removed; `--dry-run` removes nothing.
"""
import argparse
import gzip
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALWAYS = {"manifest.json", "env.json"}


def named_by_manifests(folder):
    """The files each manifest.json under `folder` names (a stage's CSVs and texts)."""
    named = set()
    for m in folder.rglob("manifest.json"):
        try:
            doc = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        for stage in doc.get("stages", []) if isinstance(doc, dict) else []:
            for kind in ("tables", "texts"):
                files = stage.get(kind) if isinstance(stage, dict) else None
                for rel in files.values() if isinstance(files, dict) else []:
                    if isinstance(rel, str) and ".." not in Path(rel).parts:
                        named.add((m.parent / rel).resolve())
    return named


def top_folder(path):
    """data/results/<gpu>/<date-name> of a path under data/results."""
    rel = path.relative_to(ROOT / "data" / "results")
    return ROOT / "data" / "results" / rel.parts[0] / rel.parts[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--commit", required=True, help="the commit whose tree still holds the removed files")
    ap.add_argument("--keep", type=Path, help="a file listing paths (relative to the repository) to keep")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    keep = set()
    if args.keep:
        keep = {(ROOT / line.strip()).resolve() for line in args.keep.read_text().splitlines() if line.strip()}
    removed = {}
    for folder in args.folders:
        folder = folder.resolve()
        named = named_by_manifests(folder)
        for f in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
            if not (f.exists() or f.is_symlink()):  # a plain log this loop has just gzipped
                continue
            r = f.resolve()
            # A launch log kept plain or gzipped is the same file.
            same = r.with_suffix("") if r.name.endswith(".log.gz") else r.with_name(r.name + ".gz")
            if same in keep:
                r = same
            # A profiler's CSV export (ncu.csv) is a dump, not a result table.
            table = f.suffix == ".csv" and not f.name.startswith("ncu")
            if f.suffix == ".md" or table or f.name in ALWAYS or r in named or r in keep:
                if f.name.startswith("launch-") and f.suffix == ".log" and not args.dry_run:
                    with open(f, "rb") as src, gzip.GzipFile(f.with_suffix(".log.gz"), "wb", mtime=0) as dst:
                        shutil.copyfileobj(src, dst)
                    f.unlink()
                continue
            removed.setdefault(top_folder(f), []).append(f)
            if not args.dry_run:
                f.unlink()
    for top, files in sorted(removed.items()):
        print(f"{top.relative_to(ROOT)}: {len(files)} files removed")
        if args.dry_run:
            continue
        for d in sorted({p.parent for p in files}, key=lambda p: -len(p.parts)):
            while d != top and d.is_dir() and not any(d.iterdir()):
                d.rmdir()
                d = d.parent
        run_md = top / "RUN.md"
        if run_md.exists() and f"`git checkout {args.commit} -- {top.relative_to(ROOT)}`" in run_md.read_text():
            continue
        note = (f"\n\nRaw logs, profiler dumps, consoles and probe sources of this folder ({len(files)} files) are in "
                f"the history: `git checkout {args.commit} -- {top.relative_to(ROOT)}` brings them back.\n")
        text = run_md.read_text().rstrip("\n") if run_md.exists() else f"# {top.name}"
        run_md.write_text(text + note)


if __name__ == "__main__":
    main()
