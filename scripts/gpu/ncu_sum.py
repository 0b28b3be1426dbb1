#!/usr/bin/env python3
"""Kernel time by kernel name and grid from an ncu CSV (gpu__time_duration.sum), largest first,
with the share of the total and the mean per launch: where a prefill's time goes
(scripts/gpu/profile-prefill.sh).
    python3 scripts/gpu/ncu_sum.py ncu.csv
    python3 scripts/gpu/ncu_sum.py ncu.csv --layers   # one prefill's layers only (see below)"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
names = rows[head]
launches = []
for r in rows[head + 1:]:
    d = dict(zip(names, r))
    if len(r) != len(names) or d["Metric Name"] != "gpu__time_duration.sum":
        continue
    ns = float(d["Metric Value"].replace(",", "")) * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6}.get(d["Metric Unit"], 1)
    launches.append((d["Kernel Name"].split("(")[0][:80] + " " + d["Grid Size"], ns))
if "--layers" in sys.argv:
    # The launches between one fused attention of a long prefill and the next are one layer's
    # (its products after the attention, the next layer's before it). The last run of such
    # attentions is the timed prefill; its 27 gaps and 28 attentions, scaled to 28 layers.
    big = [i for i, (n, _) in enumerate(launches) if "vram_lab_flash" in n and int(n.split("(")[-1].split(",")[0]) >= 64]
    gaps = sorted(b - a for a, b in zip(big, big[1:]))
    runs, run = [], [big[0]]
    for a, b in zip(big, big[1:]):
        if b - a > 1.5 * gaps[len(gaps) // 2]:  # more than a layer apart: another prefill
            runs.append(run)
            run = []
        run.append(b)
    runs.append(run)
    last = runs[-1]
    print(f"{len(runs)} prefills seen; the last: {len(last)} attentions, launches {last[0]}..{last[-1]}")
    window = [launches[i] for i in last] + [l for a, b in zip(last, last[1:]) for l in launches[a + 1:b]]
    scale = {n: 1.0 if "vram_lab_flash" in n else len(last) / (len(last) - 1) for n, _ in window}
    launches = [(n, ns * scale[n]) for n, ns in window]
time = collections.Counter()
count = collections.Counter()
for name, ns in launches:
    time[name] += ns
    count[name] += 1
total = sum(time.values())
print(f"{len(time)} kernels, {sum(count.values())} launches, {total / 1e6:.2f} ms")
for name, ns in time.most_common():
    if "--layers" in sys.argv:
        # The rows between attentions are scaled to every layer: a launch's own time is the row's
        # total over the layers, not over its launches.
        print(f"{ns / 1e6:10.2f} ms {100 * ns / total:5.1f} % {count[name]:5d} launches, {ns / len(last) / 1e3:9.1f} µs a layer  {name}")
    else:
        print(f"{ns / 1e6:10.2f} ms {100 * ns / total:5.1f} % {count[name]:5d} × {ns / count[name] / 1e3:9.1f} µs  {name}")
