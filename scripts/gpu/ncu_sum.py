#!/usr/bin/env python3
"""Kernel time by kernel name and grid from an ncu CSV (gpu__time_duration.sum), largest first,
with the share of the total and the mean per launch: where a prefill's time goes
(scripts/gpu/profile-prefill.sh).
    python3 scripts/gpu/ncu_sum.py ncu.csv"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
names = rows[head]
time = collections.Counter()
count = collections.Counter()
for r in rows[head + 1:]:
    d = dict(zip(names, r))
    if len(r) != len(names) or d["Metric Name"] != "gpu__time_duration.sum":
        continue
    ns = float(d["Metric Value"].replace(",", "")) * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6}.get(d["Metric Unit"], 1)
    name = d["Kernel Name"].split("(")[0][:80] + " " + d["Grid Size"]
    time[name] += ns
    count[name] += 1
total = sum(time.values())
print(f"{len(time)} kernels, {sum(count.values())} launches, {total / 1e6:.2f} ms")
for name, ns in time.most_common():
    print(f"{ns / 1e6:10.2f} ms {100 * ns / total:5.1f} % {count[name]:5d} × {ns / count[name] / 1e3:9.1f} µs  {name}")
