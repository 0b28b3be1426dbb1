"""The findings of the notebooks' Live runs beside those of `vram-lab run` on the same GPU, as a
Markdown table (one row per stage and finding both made), for a RUN.md.

    python3 scripts/compare_notebooks_run.py NOTEBOOK_RUNS_DIR RUN_DIR > table.md

NOTEBOOK_RUNS_DIR holds the run folders the notebooks wrote (target/notebook-runs/<time>-<stage>);
RUN_DIR is one `vram-lab run` folder. A finding a notebook run made twice (two notebooks ran the
stage) is shown once per run folder."""
import json
import sys
from pathlib import Path


def findings(manifest):
    m = json.loads(manifest.read_text())
    for s in m["stages"]:
        if s.get("status") != "done":
            continue
        for f in s.get("findings", []):
            yield s["name"], f, m


def fmt(v):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def main():
    nb_dir, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
    run = {(stage, f["what"]): f for stage, f, _ in findings(run_dir / "manifest.json")}
    rows = []
    for man in sorted(nb_dir.glob("*/manifest.json")):
        for stage, f, m in findings(man):
            r = run.get((stage, f["what"]))
            cfg_cmd = m["command"].split(" ", 1)[1] if " " in m["command"] else m["command"]
            diff = ""
            if r and isinstance(f["measured"], (int, float)) and isinstance(r["measured"], (int, float)) and r["measured"]:
                diff = f"{100 * (f['measured'] - r['measured']) / abs(r['measured']):+.1f} %"
            rows.append((man.parent.name, stage, f["what"], f["unit"], fmt(f["measured"]), fmt(r["measured"]) if r else "not in the run",
                         diff, fmt(f.get("predicted")), fmt(f.get("report"))))
    print("| notebook run | stage | finding | unit | notebook Live | `vram-lab run` | difference | predicted | report |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
