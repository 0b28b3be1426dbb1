"""The greedy tokens of the compute-8.9 build beside the 9.0 build's (scripts/gpu/compute_89.sh):
    python3 scripts/gpu/compare_tokens.py DIR_90 DIR_89
prints, per precision, whether the generated ids are equal, and exits 1 when any differ."""
import json
import sys
from pathlib import Path

a, b = Path(sys.argv[1]), Path(sys.argv[2])
differ = 0
for p in ("bf16", "q4_k_m"):
    x = json.loads((a / f"generate-{p}-90.json").read_text())["generated_ids"]
    y = json.loads((b / f"generate-{p}-89.json").read_text())["generated_ids"]
    same = x == y
    differ += not same
    print(f"{p}: {len(y)} tokens of the 8.9 build {'equal' if same else 'differ from'} the 9.0 build's")
sys.exit(1 if differ else 0)
