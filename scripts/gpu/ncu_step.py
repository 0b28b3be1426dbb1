#!/usr/bin/env python3
"""One decoding step's kernels from an ncu CSV (scripts/gpu/profile-step.sh): the step is the
launches between two of the head's products (the matrix-vector kernel with the most blocks); per
kernel and grid, the count, the time and the DRAM read rate.
    python3 scripts/gpu/ncu_step.py ncu.csv"""
import collections
import csv
import math
import re
import sys

rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
names = rows[head]
kernels = {}
for r in rows[head + 1:]:
    if len(r) != len(names):
        continue
    d = dict(zip(names, r))
    k = kernels.setdefault(int(d["ID"]), {"name": d["Kernel Name"], "grid": d["Grid Size"]})
    k[d["Metric Name"]] = float(d["Metric Value"].replace(",", ""))
ks = [kernels[i] for i in sorted(kernels)]
def blocks(k):
    return math.prod(int(v) for v in re.findall(r"\d+", k["grid"]))


gemv = [i for i, k in enumerate(ks) if "gemv" in k["name"]]
top = max(blocks(ks[i]) for i in gemv)
heads = [i for i in gemv if blocks(ks[i]) == top]
if len(heads) < 2:
    sys.exit("fewer than two head products in the profile: take more launches")
step = ks[heads[0] + 1:heads[1] + 1]
t = sum(k["gpu__time_duration.sum"] for k in step)
b = sum(k["dram__bytes_read.sum"] for k in step)
print(f"one step: {len(step)} kernels, {t / 1e3:.1f} us, {b / 1e9:.3f} GB read, {b / t / 1e3:.2f} TB/s")
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for k in step:
    key = f"{k['name'][:48]} {k['grid']}"
    agg[key][0] += 1
    agg[key][1] += k["gpu__time_duration.sum"]
    agg[key][2] += k["dram__bytes_read.sum"]
print(f"{'kernel and grid':60s} {'n':>4s} {'us':>9s} {'us each':>8s} {'TB/s':>6s}")
for key, (n, tt, bb) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{key[:60]:60s} {n:4d} {tt / 1e3:9.1f} {tt / n / 1e3:8.2f} {bb / max(tt, 1) / 1e3:6.2f}")
