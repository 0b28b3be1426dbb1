#!/usr/bin/env python3
"""One decoding step's kernels from an Nsight Compute CSV (scripts/gpu/decode_profile.sh): the kernels
between the last two argmax launches (one step of the captured graph, each node profiled), grouped by
name, with their time, DRAM bytes read and the rate.
    python3 scripts/gpu/ncu_step.py ncu.csv[.gz]"""
import collections
import csv
import gzip
import sys

opened = gzip.open(sys.argv[1], "rt") if sys.argv[1].endswith(".gz") else open(sys.argv[1])
rows = list(csv.DictReader(l for l in opened if not l.startswith("==")))
k = {}
for r in rows:
    d = k.setdefault(int(r["ID"]), {"name": r["Kernel Name"]})
    d[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
arg = [i for i in sorted(k) if "argmax" in k[i]["name"]]
if len(arg) < 2:
    sys.exit("fewer than two argmax launches in the profile: decode more tokens")
step = [i for i in sorted(k) if arg[-2] < i <= arg[-1]]
tot = sum(k[i]["gpu__time_duration.sum"] for i in step)
byt = sum(k[i]["dram__bytes_read.sum"] for i in step)
print(f"one step: {len(step)} kernels, {tot / 1e3:,.1f} us, {byt / 1e6:,.1f} MB read, {byt / tot:,.0f} GB/s")
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for i in step:
    a = agg[k[i]["name"]]
    a[0] += 1
    a[1] += k[i]["gpu__time_duration.sum"]
    a[2] += k[i]["dram__bytes_read.sum"]
print("| kernel | launches | us | share | MB read | GB/s | us a launch |")
print("|---|---:|---:|---:|---:|---:|---:|")
for n, (c, t, b) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"| `{n}` | {c} | {t / 1e3:,.1f} | {100 * t / tot:.1f} % | {b / 1e6:,.1f} | {b / t:,.0f} | {t / c / 1e3:.2f} |")
