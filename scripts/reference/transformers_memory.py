#!/usr/bin/env python3
"""What transformers takes on a GPU, for `vram-lab estimate --engine transformers` to be checked
against: the report's KV-cache sweep (`exp1_kv_cache.py`: `_ = model(input_ids)` with lengths
doubling from 1,024 until PyTorch runs out of memory) run as the report wrote it, for any preset
and dtype, on the whole GPU or on an emulated card.

    python3 scripts/reference/transformers_memory.py sweep --model data/models/qwen2.5-7b.json \
        --dtype bfloat16 --card 24084.5 --load pretrained --out sweep.jsonl

One JSON object per line: the load (allocated, reserved, the segments PyTorch mapped), then per
length the allocated bytes before and after the forward, the peak of allocated and reserved
during it, and the outcome; at the OOM, PyTorch's message and its counters. --trace-lens records
PyTorch's allocator history (every alloc and free with the transformers line that asked) for
those lengths, so the lab's model of the forward can be read against it.

--load pretrained saves the random weights with save_pretrained and loads them back with
from_pretrained(device_map="cuda"), the report's path; --load synthetic draws them in place.
--card MIB emulates a smaller card with a ballast held outside PyTorch (pytorch_reference.py).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_reference import emit, hold_ballast, process_used, synthetic_model  # noqa: E402


def segments():
    """PyTorch's mapped segments as (pool, size, allocated bytes), largest first."""
    import torch

    segs = [(s["segment_type"], s["total_size"], s["allocated_size"]) for s in torch.cuda.memory_snapshot()]
    return sorted(segs, key=lambda s: -s[1])


def frame_of(entry):
    """The innermost transformers line of an allocator event, and the innermost frame's name."""
    frames = entry.get("frames") or []
    tf = next((f for f in frames if "/transformers/" in f.get("filename", "")), None)
    where = f"{os.path.basename(tf['filename'])}:{tf['line']}:{tf['name']}" if tf else ""
    inner = frames[0]["name"] if frames else ""
    return where, inner


def dump_trace(out, label):
    import torch

    snap = torch.cuda.memory._snapshot()
    for i, e in enumerate(snap["device_traces"][torch.cuda.current_device()]):
        if e["action"] not in ("alloc", "free_completed", "segment_alloc", "segment_free", "oom"):
            continue
        where, inner = frame_of(e)
        emit(out, trace=label, i=i, action=e["action"], addr=e.get("addr", 0), size=e.get("size", 0), where=where, inner=inner)


def load(args, out, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    if args.load == "synthetic":
        _, model = synthetic_model(args.model, "cuda", dtype)
        return model
    tmp = tempfile.mkdtemp(prefix="vram-lab-hf-", dir=args.scratch)
    try:
        # Drawn on the GPU, kept on the host, written to disk: the GPU starts empty for the load.
        _, model = synthetic_model(args.model, "cpu", dtype)
        model.save_pretrained(tmp)
        del model
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=1_000_000)
        model = AutoModelForCausalLM.from_pretrained(tmp, device_map="cuda", dtype=getattr(torch, dtype))
        dump_trace(out, "load")
        torch.cuda.memory._record_memory_history(enabled=None)
        return model.eval()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sweep(args, out):
    import torch

    ballast = hold_ballast(args.card) if args.card else None
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    case = dict(model=os.path.basename(args.model).removesuffix(".json"), dtype=args.dtype, card=args.card, load_path=args.load)
    emit(out, kind="start", **case, device_free=free0, device_total=total, process_used=process_used(), torch=torch.__version__, transformers=__import__("transformers").__version__)
    try:
        model = load(args, out, args.dtype)
    except torch.OutOfMemoryError as e:
        emit(out, kind="load", **case, outcome="oom", allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(), error=str(e)[:400])
        return
    torch.cuda.synchronize()
    emit(out, kind="load", **case, outcome="ok", allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(), peak=torch.cuda.max_memory_allocated(), attn=model.config._attn_implementation, process_used=process_used(), segments=segments())
    seq = args.start
    _ = None
    while seq <= args.max:
        # The report's input: random ids below 1,000, batch 1.
        input_ids = torch.randint(0, 1000, (1, seq)).to("cuda")
        torch.cuda.synchronize()
        t0 = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        tracing = seq in args.trace_lens
        if tracing:
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=1_000_000)
        rec = dict(kind="step", **case, seq=seq, before=t0, reserved_before=torch.cuda.memory_reserved())
        try:
            with torch.no_grad():
                _ = model(input_ids)
            torch.cuda.synchronize()
            rec.update(outcome="ok", after=torch.cuda.memory_allocated())
        except torch.OutOfMemoryError as e:
            rec.update(outcome="oom", after=torch.cuda.memory_allocated(), error=str(e)[:400])
        stats = torch.cuda.memory_stats()
        rec.update(peak=torch.cuda.max_memory_allocated(), reserved=torch.cuda.memory_reserved(), peak_reserved=torch.cuda.max_memory_reserved(), retries=stats.get("num_alloc_retries", 0), ooms=stats.get("num_ooms", 0), process_used=process_used())
        if tracing:
            dump_trace(out, f"forward-{seq}")
            torch.cuda.memory._record_memory_history(enabled=None)
        emit(out, **rec)
        if rec["outcome"] == "oom":
            break
        seq *= 2
    del ballast


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("sweep")
    p.add_argument("--model", required=True, help="a preset's config (data/models/*.json)")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    p.add_argument("--card", type=float, default=0.0, help="emulate a card of this many MiB (0: the whole GPU)")
    p.add_argument("--load", choices=["pretrained", "synthetic"], default="pretrained")
    p.add_argument("--scratch", default=None, help="where --load pretrained writes its checkpoint")
    p.add_argument("--start", type=int, default=1024)
    p.add_argument("--max", type=int, default=65536)
    p.add_argument("--trace-lens", type=lambda v: [int(x) for x in v.split(",") if x], default=[])
    p.add_argument("--out", help="write the JSON lines here (default: stdout)")
    args = ap.parse_args()
    out = open(args.out, "w") if args.out else sys.stdout
    sweep(args, out)


if __name__ == "__main__":
    main()
