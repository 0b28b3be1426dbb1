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
  offload the report's stage 4: the model in BF16 on the GPU alone, then with accelerate's
         device map limited to --gpu-budget on the GPU (the rest in host RAM, moved to the GPU
         layer by layer at each forward), tok/s of greedy decoding for each. The weights are
         random with the exact shapes of the lab's preset (--model, a data/models/*.json).

  bench  the speed the lab's `bench` stands beside: the model in BF16 on the GPU, prefill of each
         --prompt-lens (one forward, last-token logits) and greedy decoding with transformers'
         generate (--new-tokens after a --decode-prompt), median of --repeats after a warm-up.

  train  a training step the lab's `train` stands beside: transformers' Qwen2 with the preset's
         shapes (--model), one forward over --batch x --seq random tokens with labels (cross-entropy
         over every position), backward, torch.optim.AdamW, in F32 (--dtype f32) or with BF16
         autocast over F32 weights (--dtype bf16-autocast); without and with
         gradient_checkpointing_enable(). Per setting: weights, the AdamW states after the first
         step, gradients, and the peak of the second step (torch.cuda.max_memory_allocated).

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
        # The loop variable holds the last block: left alive it would outlive this trial and sit
        # in the next one (a 512 MiB segment the 2026-12-06 run's `reused` rows carried).
        b = None
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


def synthetic_model(path, device, dtype="bfloat16"):
    """transformers' model of the preset's family with its exact shapes and N(0, 0.02) weights
    (BF16 unless `dtype` names another torch dtype) on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = json.load(open(path))
    cfg_dict.pop("architectures", None)
    cfg = AutoConfig.for_model(cfg_dict.pop("model_type", "qwen2"), **cfg_dict)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=getattr(torch, dtype))
    model = model.to_empty(device=device)
    with torch.no_grad():
        # Drawn on the GPU a tensor at a time (normal_ on 7.6B CPU values takes minutes).
        for p in model.parameters():
            p.copy_((torch.randn(p.shape, device="cuda", dtype=torch.float32) * 0.02).to(p.dtype))
        torch.cuda.empty_cache()
    return cfg, model.eval()


def bench(args, out):
    import statistics
    import time

    import torch

    ballast = hold_ballast(args.card) if args.card else None
    cfg, model = synthetic_model(args.model, "cuda")
    gib = 1 << 30
    emit(out, experiment="bench", case="load", precision="bf16", allocated_gib=round(torch.cuda.memory_allocated() / gib, 3), reserved_gib=round(torch.cuda.memory_reserved() / gib, 3))
    gen = torch.Generator().manual_seed(0)

    def timed(f):
        f()  # warm-up
        times = []
        for _ in range(args.repeats):
            torch.cuda.synchronize()
            t = time.perf_counter()
            f()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    for seq in args.prompt_lens:
        ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=gen).cuda()
        torch.cuda.reset_peak_memory_stats()
        try:
            with torch.no_grad():
                # logits_to_keep=1: the last position's logits only, as the lab's prefill.
                s = timed(lambda: model(ids, logits_to_keep=1, use_cache=True))
            emit(out, experiment="bench", case="prefill", precision="bf16", seq=seq, tok_s=round(seq / s, 2), peak_gib=round(torch.cuda.max_memory_allocated() / gib, 3))
        except torch.cuda.OutOfMemoryError as e:
            emit(out, experiment="bench", case="prefill", precision="bf16", seq=seq, outcome="oom", error=str(e)[:200])
        torch.cuda.empty_cache()
    ids = torch.randint(0, cfg.vocab_size, (1, args.decode_prompt), generator=gen).cuda()
    kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
    s = timed(lambda: model.generate(ids, **kw))
    # generate's time includes its prefill of the short prompt, as the report's tok/s does.
    emit(out, experiment="bench", case="decode", precision="bf16", tok_s=round(args.new_tokens / s, 3), ms_per_token=round(1e3 * s / args.new_tokens, 3), new_tokens=args.new_tokens, prompt=args.decode_prompt, torch=torch.__version__)
    del ballast


def train(args, out):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    gib = 1 << 30
    cfg_dict = json.load(open(args.model))
    cfg_dict.pop("architectures", None)
    cfg = AutoConfig.for_model(cfg_dict.pop("model_type", "qwen2"), **cfg_dict)
    gen = torch.Generator().manual_seed(0)
    for ckpt in (False, True):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32, attn_implementation="sdpa")
        model.train()
        if ckpt:
            model.gradient_checkpointing_enable()
        model.config.use_cache = False
        weights = torch.cuda.memory_allocated()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        rec = dict(experiment="train", case="step", dtype=args.dtype, checkpointing=ckpt, batch=args.batch, seq=args.seq, params=sum(p.numel() for p in model.parameters()), weights_gib=round(weights / gib, 4), torch=torch.__version__)
        try:
            for step in range(2):
                ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen).cuda()
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bf16-autocast"):
                    loss = model(input_ids=ids, labels=ids).loss
                forward = torch.cuda.memory_allocated() - before
                loss.backward()
                del loss
                grads = torch.cuda.memory_allocated() - before
                backward_peak = torch.cuda.max_memory_allocated()
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                # The states exist after the first step (AdamW makes them lazily).
                rec.update(step=step, states_gib=round((before - weights) / gib, 4) if step else None, forward_keeps_gib=round(forward / gib, 4), gradients_gib=round(grads / gib, 4), backward_peak_gib=round(backward_peak / gib, 4), step_peak_gib=round(torch.cuda.max_memory_allocated() / gib, 4), outcome="ok")
        except torch.cuda.OutOfMemoryError as e:
            rec.update(outcome="oom", error=str(e)[:200])
        emit(out, **rec)
        del model, opt
        torch.cuda.empty_cache()


def offload(args, out):
    import time

    import torch
    from accelerate import dispatch_model, infer_auto_device_map

    ballast = hold_ballast(args.card) if args.card else None
    t0 = time.time()
    cfg, model = synthetic_model(args.model, "cpu")
    emit(out, experiment="offload", case="init", seconds=round(time.time() - t0, 2), params=sum(p.numel() for p in model.parameters()))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, args.prompt), generator=gen)

    def tok_s(m, device):
        x = ids.to(device)
        kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        m.generate(x, **dict(kw, max_new_tokens=3, min_new_tokens=3))
        torch.cuda.synchronize()
        t = time.time()
        m.generate(x, **kw)
        torch.cuda.synchronize()
        return args.new_tokens / (time.time() - t)

    gib = 1 << 30
    if not args.skip_full:
        model.to("cuda")
        full = tok_s(model, "cuda")
        emit(out, experiment="offload", case="full_gpu", tok_s=round(full, 3), allocated_gib=round(torch.cuda.memory_allocated() / gib, 3))
        model.to("cpu")
        torch.cuda.empty_cache()
    else:
        full = None
    torch.cuda.reset_peak_memory_stats()
    device_map = infer_auto_device_map(model, max_memory={0: args.gpu_budget, "cpu": "200GiB"}, no_split_module_classes=["Qwen2DecoderLayer"])
    model = dispatch_model(model, device_map)
    on_cpu = [k for k, v in device_map.items() if v == "cpu"]
    offloaded = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if any(n == k or n.startswith(k + ".") for k in on_cpu))
    emit(out, experiment="offload", case="dispatched", allocated_gib=round(torch.cuda.memory_allocated() / gib, 3), reserved_gib=round(torch.cuda.memory_reserved() / gib, 3), modules_on_cpu=len(on_cpu))
    speed = tok_s(model, "cuda")
    rec = dict(experiment="offload", case="accelerate", gpu_budget=args.gpu_budget, tok_s=round(speed, 3), offloaded_gib=round(offloaded / gib, 3), peak_gib=round(torch.cuda.max_memory_allocated() / gib, 3), new_tokens=args.new_tokens)
    if full:
        rec["slowdown_pct"] = round((1 - speed / full) * 100, 2)
    emit(out, **rec)
    del ballast


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    model_json = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "models", "qwen2.5-7b.json")

    def stage(name, model=False):
        """A subcommand with the flags every stage takes."""
        p = sub.add_parser(name)
        p.add_argument("--card", type=float, default=0.0, help="emulate a card of this many MiB (0: the whole GPU)")
        p.add_argument("--out", help="write the JSON lines here (default: stdout)")
        if model:
            p.add_argument("--model", default=model_json, help="the preset's config (data/models/*.json)")
        return p

    for name in ("frag", "frag-one"):
        p = stage(name)
        p.add_argument("--blocks", type=int, default=10)
        p.add_argument("--block-mib", type=int, default=500)
        p.add_argument("--request-mib", type=int, default=2048)
        p.add_argument("--hole-mib", type=int, default=512)
        p.add_argument("--hole-request-mib", type=int, default=2048)
    p = stage("bench", model=True)
    p.add_argument("--prompt-lens", type=lambda v: [int(x) for x in v.split(",")], default=[512, 32768])
    p.add_argument("--decode-prompt", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p = stage("offload", model=True)
    p.add_argument("--gpu-budget", default="5GiB", help="accelerate's max_memory for the GPU (the report: 5GiB)")
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=50, help="the report: 50")
    p.add_argument("--skip-full", action="store_true", help="no full-GPU run (a model larger than the card)")
    p = stage("train", model=True)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=["f32", "bf16-autocast"], default="f32")
    args = ap.parse_args()
    out = open(args.out, "w") if getattr(args, "out", None) else sys.stdout
    {"frag": frag, "frag-one": frag_one, "offload": offload, "bench": bench, "train": train}[args.stage](args, out)


if __name__ == "__main__":
    main()
