"""The greedy tokens of the compute-8.9 build beside the 9.0 build's (scripts/gpu/compute_89.sh):
    python3 scripts/gpu/compare_tokens.py DIR_90 DIR_89
prints, per precision, whether the generated ids are equal, and exits 1 when any differ."""
import json
import sys
from pathlib import Path

a, b = Path(sys.argv[1]), Path(sys.argv[2])
differ = 0
for p in ("f32", "bf16", "q4_k_m"):
    runs = []
    for d, cap in ((a, 90), (b, 89)):
        text = (d / f"generate-{p}-{cap}.json").read_text()
        runs.append(json.loads(text)["generated_ids"] if text.strip() else None)
        if not text.strip():
            print(f"{p}: the {cap / 10} build generated nothing: {(d / f'generate-{p}-{cap}.err').read_text().strip()}")
    x, y = runs
    if x is None or y is None:
        differ += 1
        continue
    same = x == y
    if not same:
        first = next(i for i, (u, v) in enumerate(zip(x, y)) if u != v)
        print(f"{p}: the first {first} tokens equal")
    differ += not same
    print(f"{p}: {len(y)} tokens of the 8.9 build {'equal' if same else 'differ from'} the 9.0 build's")
sys.exit(1 if differ else 0)
