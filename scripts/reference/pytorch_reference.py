#!/usr/bin/env python3
"""The report's experiments with the report's own stack (PyTorch), for the PyTorch columns of
vram-lab's tables. Run it on the same GPU, in the same call, as the lab; it prints one JSON object
per line (or writes them with --out), which `vram-lab <stage> --pytorch FILE` reads.

    python3 scripts/reference/pytorch_reference.py frag --card 24084.5 --out torch-frag.jsonl

Stages:
  frag   the report's fragmentation sequence (10 x 500 MiB, odd ones freed, 2 GiB asked) and the
         false-OOM trials (a card full of 512 MiB blocks, every other one freed, 2 GiB asked),
         once with PyTorch's default caching allocator and once with expandable_segments:True
         (each in its own process: the setting is read when CUDA starts).

--card MIB emulates a smaller card as the lab does: a ballast of (GPU total - MIB) is held with
cuMemAlloc, outside PyTorch's allocator, so PyTorch sees the card's free memory.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys

MIB = 1 << 20


def emit(out, **rec):
    out.write(json.dumps(rec) + "\n")
    out.flush()


def hold_ballast(card_mib):
    """Holds GPU memory outside PyTorch so the GPU looks like a card of card_mib MiB."""
    import torch

    torch.empty(1, device="cuda")  # create the context
    free, total = torch.cuda.mem_get_info()
    want = int(card_mib * MIB)
    if want >= total:
        return None
    cuda = ctypes.CDLL("libcuda.so.1")
    ptr = ctypes.c_uint64()
    rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(total - want))
    if rc != 0:
        raise SystemExit(f"cannot hold a ballast of {(total - want) / MIB:.0f} MiB (CUresult {rc})")
    return ptr  # freed when the process exits


def process_used():
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch_device_index())
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                return p.usedGpuMemory
    except Exception:
        return None
    return None


def torch_device_index():
    import torch

    return torch.cuda.current_device()


def frag_one(args, out):
    import torch

    allocator = "pytorch-expandable" if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") else "pytorch"
    ballast = hold_ballast(args.card) if args.card else None

    def reading(step, outcome=""):
        torch.cuda.synchronize()
        emit(
            out,
            experiment="frag",
            kind="step",
            allocator=allocator,
            step=step,
            outcome=outcome,
            allocated=torch.cuda.memory_allocated(),
            reserved=torch.cuda.memory_reserved(),
            device_free=torch.cuda.mem_get_info()[0],
            process_used=process_used(),
        )

    def empty(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")

    def try_empty(n):
        try:
            return empty(n), "ok"
        except torch.OutOfMemoryError:
            return None, "oom"

    # The report's sequence, without its loop variable keeping the last block alive.
    torch.cuda.empty_cache()
    reading("start")
    blocks = [empty(args.block_mib * MIB) for _ in range(args.blocks)]
    reading("blocks_allocated", "ok")
    blocks = [b for i, b in enumerate(blocks) if i % 2 == 0]
    reading("odd_freed")
    big, outcome = try_empty(args.request_mib * MIB)
    reading("request", outcome)
    del blocks, big
    reading("all_freed")
    torch.cuda.empty_cache()
    reading("cache_emptied")

    # The report's own code: `for i in range(10): t = torch.empty(...)` leaves `t` holding the
    # last block, so freeing the odd ones frees four, not five.
    blocks = []
    for i in range(args.blocks):
        t = empty(args.block_mib * MIB)
        blocks.append(t)
    blocks = [b for i, b in enumerate(blocks) if i % 2 == 0]
    torch.cuda.synchronize()
    emit(out, experiment="frag", kind="report_script", allocator=allocator, allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved())
    del blocks, t
    torch.cuda.empty_cache()

    # False OOM.
    hole = args.hole_mib * MIB
    request = args.hole_request_mib * MIB
    for layout in ("fresh", "reused"):
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        n = (free0 - hole // 2) // hole
        if layout == "reused":
            big = empty(n * hole)
            del big
        blocks = []
        for _ in range(n):
            b, o = try_empty(hole)
            if b is None:
                break
            blocks.append(b)
        count = len(blocks)
        blocks = [b for i, b in enumerate(blocks) if i % 2 == 0]
        torch.cuda.synchronize()
        reserved_before = torch.cuda.memory_reserved()
        free_before = torch.cuda.mem_get_info()[0]
        big, outcome = try_empty(request)
        torch.cuda.synchronize()
        emit(
            out,
            experiment="frag",
            kind="false_oom",
            allocator=allocator,
            layout=layout,
            device_free_start=free0,
            blocks=count,
            hole=hole,
            freed=(count // 2) * hole,
            request=request,
            outcome=outcome,
            reserved_before=reserved_before,
            reserved_after=torch.cuda.memory_reserved(),
            device_free_before=free_before,
            device_free_after=torch.cuda.mem_get_info()[0],
        )
        del blocks, big
        torch.cuda.empty_cache()
    del ballast


def frag(args, out):
    """Both allocators, each in a process of its own."""
    me = os.path.abspath(__file__)
    passed = [f"--card={args.card}", f"--blocks={args.blocks}", f"--block-mib={args.block_mib}", f"--request-mib={args.request_mib}", f"--hole-mib={args.hole_mib}", f"--hole-request-mib={args.hole_request_mib}"]
    for conf in ("", "expandable_segments:True"):
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        r = subprocess.run([sys.executable, me, "frag-one", *passed], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            raise SystemExit(f"frag-one ({conf or 'default allocator'}) failed with exit code {r.returncode}")
        out.write(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    for name in ("frag", "frag-one"):
        p = sub.add_parser(name)
        p.add_argument("--card", type=float, default=0.0, help="emulate a card of this many MiB (0: the whole GPU)")
        p.add_argument("--blocks", type=int, default=10)
        p.add_argument("--block-mib", type=int, default=500)
        p.add_argument("--request-mib", type=int, default=2048)
        p.add_argument("--hole-mib", type=int, default=512)
        p.add_argument("--hole-request-mib", type=int, default=2048)
        p.add_argument("--out", help="write the JSON lines here (default: stdout)")
    args = ap.parse_args()
    out = open(args.out, "w") if getattr(args, "out", None) else sys.stdout
    {"frag": frag, "frag-one": frag_one}[args.stage](args, out)


if __name__ == "__main__":
    main()
