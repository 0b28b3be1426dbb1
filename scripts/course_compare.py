#!/usr/bin/env python3
"""The folder scripts/course-check.sh wrote, read beside what the repository commits: each figure
of the run beside its prediction and the committed emulation of an RTX 4090 on an H100
(figures.csv), the logits of each precision beside the committed 9.0 build's (parity.csv), and a
short pass/fail summary to paste (summary.txt, also printed).
    python3 scripts/course_compare.py FOLDER

Rules (each line of the summary says which held):
- every step exited 0;
- parity: per precision, the share of positions whose top-1 ids agree with F32 on the CPU is at
  most 2 of 48 positions below the committed build's, and the largest logit difference (over the
  reference's largest logit) at most twice the committed build's: a build that miscompiles a kernel
  misses both by far, while a card's own rounding does not;
- memory figures (GiB, MiB) within 3 % (the tolerance `vram-lab check` uses) of the committed
  emulation's where it has the figure, else of their prediction: the lab's known gaps between a
  figure and its prediction (each finding's note says why) are the same on every card;
- throughputs at most their physical ceiling (2 % for the timer's spread).
"""
import csv
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The committed emulation of an RTX 4090 on an H100, and the 9.0 build's logits of the rehearsal.
COMMITTED = {
    "run": "data/results/h100/2026-12-06-run/run",
    "frag": "data/results/h100/2026-12-06-allocator-offload-pytorch/frag",
    "offload": "data/results/h100/2026-12-06-allocator-offload-pytorch/offload",
    "parity": "data/results/h100/2026-12-06-course-check/parity/parity-90.json",
}
MEMORY_UNITS = ("GiB", "MiB")
MEMORY_TOLERANCE = 0.03
CEILING_SLACK = 1.02
PARITY_POSITIONS_SLACK = 2


def findings(folder):
    """{(stage, what): finding} of a run folder's manifest, {} when there is none."""
    path = os.path.join(folder, "manifest.json")
    if not os.path.isfile(path):
        return {}, {}
    m = json.load(open(path))
    found = {(s["name"], f["what"]): f for s in m.get("stages", []) for f in s.get("findings", [])}
    status = {s["name"]: s.get("status") for s in m.get("stages", [])}
    return found, status


def fmt(v):
    return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def compare_runs(out, lines):
    rows = []
    for step in ("frag", "offload", "run"):
        mine, status = findings(os.path.join(out, step))
        if not status:
            continue
        theirs, _ = findings(os.path.join(ROOT, COMMITTED[step]))
        bad_stages = [s for s, st in status.items() if st != "done"]
        lines.append(f"{'PASS' if not bad_stages else 'FAIL'} {step}: {len(status) - len(bad_stages)} of {len(status)} stages done"
                     + (f" (not done: {', '.join(bad_stages)})" if bad_stages else ""))
        memory, memory_ok, fast = 0, 0, []
        for (stage, what), f in mine.items():
            measured, predicted, ceiling = f.get("measured"), f.get("predicted"), f.get("ceiling")
            c = theirs.get((stage, what), {})
            within = None
            if measured is not None and predicted:
                within = (measured - predicted) / predicted
            if measured is not None and f.get("unit") in MEMORY_UNITS:
                against = c.get("measured") if c.get("measured") is not None else predicted
                if against:
                    memory += 1
                    memory_ok += abs(measured - against) <= MEMORY_TOLERANCE * abs(against)
            if measured is not None and ceiling and measured > ceiling * CEILING_SLACK:
                fast.append(f"{stage}: {what}")
            rows.append([step, stage, what, f.get("unit"), fmt(measured), fmt(predicted),
                         "" if within is None else f"{within * 100:+.2f} %", fmt(ceiling), fmt(c.get("measured")), fmt(f.get("report"))])
        if memory:
            lines.append(f"{'PASS' if memory_ok == memory else 'FAIL'} {step}: {memory_ok} of {memory} memory figures within 3 % of the committed emulation (else of their prediction)")
        lines.append(f"{'PASS' if not fast else 'FAIL'} {step}: no throughput above its ceiling" + (f" ({'; '.join(fast)})" if fast else ""))
    with open(os.path.join(out, "figures.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "stage", "figure", "unit", "this card", "prediction", "measured vs prediction", "ceiling", "committed emulation (H100 as RTX 4090)", "the report"])
        w.writerows(rows)


def compare_parity(out, lines):
    path = os.path.join(out, "parity.json")
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    mine = json.load(open(path))
    ref_path = os.path.join(ROOT, COMMITTED["parity"])
    theirs = {p["precision"]: p for p in json.load(open(ref_path))["precisions"]} if os.path.isfile(ref_path) else {}
    rows = []
    for p in mine["precisions"]:
        n = len(p["positions"])
        agree = round(p["top1_agreement"] * n)
        c = theirs.get(p["precision"])
        verdict = "no committed figure"
        if c:
            c_agree = round(c["top1_agreement"] * len(c["positions"]))
            ok = agree >= c_agree - PARITY_POSITIONS_SLACK and p["largest_relative"] <= 2 * c["largest_relative"] + 1e-6
            verdict = "PASS" if ok else "FAIL"
            lines.append(f"{verdict} parity {p['precision']}: top-1 {agree}/{n} (committed 9.0 build {c_agree}/{len(c['positions'])}), "
                         f"largest |Δ| / max {p['largest_relative']:.3g} (committed {c['largest_relative']:.3g})")
        else:
            lines.append(f"---- parity {p['precision']}: top-1 {agree}/{n}, largest |Δ| / max {p['largest_relative']:.3g} (no committed figure)")
        rows.append([p["precision"], f"{agree}/{n}", f"{p['largest_diff']:.5g}", f"{p['largest_relative']:.5g}",
                     f"{round(c['top1_agreement'] * len(c['positions']))}/{len(c['positions'])}" if c else "",
                     f"{c['largest_relative']:.5g}" if c else "", verdict])
    with open(os.path.join(out, "parity.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["precision", "top-1 agree", "largest |Δ|", "largest |Δ| / max", "committed 9.0 build: top-1", "committed: largest |Δ| / max", "verdict"])
        w.writerows(rows)


def main():
    out = sys.argv[1]
    gpu = list(csv.reader(open(os.path.join(out, "gpu.csv"))))[1]
    lines = [f"vram-lab course check on {gpu[0].strip()} (compute {gpu[1].strip()}, {gpu[2].strip()}, driver {gpu[3].strip()})"]
    steps = open(os.path.join(out, "steps.txt")).read().splitlines() if os.path.isfile(os.path.join(out, "steps.txt")) else []
    failed = [s for s in steps if " exit " in s and not s.split(" exit ")[1].startswith("0")]
    lines.append(f"{'PASS' if not failed else 'FAIL'} steps: {len(steps) - len(failed)} of {len(steps)} exited 0" + (f" (failed: {'; '.join(failed)})" if failed else ""))
    lines += [f"---- {s}" for s in steps if "skipped" in s]
    compare_parity(out, lines)
    compare_runs(out, lines)
    verdict = "PASS" if lines and not any(l.startswith("FAIL") for l in lines[1:]) else "FAIL"
    lines.append(f"{verdict}: {sum(l.startswith('PASS') for l in lines)} checks passed, {sum(l.startswith('FAIL') for l in lines)} failed")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
