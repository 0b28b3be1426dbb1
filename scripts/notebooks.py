"""Writes the notebooks' source (no outputs) into notebooks/. The committed notebooks are these,
executed in replay mode by scripts/run-notebooks.sh. Edit the cells here, then re-run both.

    python3 scripts/notebooks.py
"""
import json
from pathlib import Path

DEP = """:dep vram-lab = { path = ".." }
// GPU (CUDA toolkit + driver): use this line instead, and Mode::Live below
// :dep vram-lab = { path = "..", features = ["cuda"] }"""

USE = "use vram_lab::prelude::*;"


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text.strip("\n")}


def code(src):
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": src.strip("\n")}


def notebook(cells):
    for i, c in enumerate(cells):
        c["id"] = f"c{i:02d}"
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Rust", "language": "rust", "name": "rust"},
            "language_info": {"name": "rust", "file_extension": ".rs", "mimetype": "text/rust"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def setup_cell(model, card):
    card = f'Some("{card}")' if card else "None"
    return code(f"""
// The one choice of this notebook / 本笔记本唯一的选择:
//   Mode::Replay — the committed GPU run (NVIDIA H200, emulating an RTX 4090); no GPU needed
//   Mode::Live   — run the stage here, on this kernel's device (CPU: use "synthetic:tiny")
let setup: Setup = Setup::new(Mode::Replay, "{model}", {card});
println!("{{}}", setup.describe());
""")


NB = {}

NB["00_setup"] = notebook([
    md("""
# 00 环境准备 · Setup

vram-lab 用 Rust(candle)复现实验报告《显存解剖学与精度边界测试》的每个阶段,并解释每一个数字。
vram-lab reproduces each stage of the report *VRAM anatomy and precision boundaries* in Rust (candle)
and explains every number it printed.

**两种模式 / Two modes.** Every notebook starts with one `Setup`: `Mode::Replay` renders a committed
GPU run from `data/results/` (what you see rendered here), `Mode::Live` runs the stage on this
kernel's device. On CPU use the `synthetic:tiny` model; on a GPU, `synthetic:qwen2.5-7b` with
`Some("rtx4090")` reproduces the report's card on any larger GPU.

**AutoDL:**
- 安装内核 / install the kernel: `bash scripts/install-kernel.sh` (evcxr_jupyter from crates.io); JupyterLab is already there.
- GPU: switch the `:dep` line below to the `features = ["cuda"]` one; set `CUDA_COMPUTE_CAP=89` (RTX 4090) or `86` (3090, A4000) if `nvidia-smi` is missing.
- 镜像 / mirror: `export HF_ENDPOINT=https://hf-mirror.com` before starting JupyterLab, so real checkpoints download.
- 数据盘 / data disk: keep downloads on `/root/autodl-tmp` (`VRAM_LAB_CACHE_DIR=/root/autodl-tmp/hf`), not the 30 GB system disk.
"""),
    md("## 1. 加载 crate · Load the crate\nThe first run compiles the crate and its dependencies (several minutes); later cells take a second."),
    code(DEP),
    code(USE),
    setup_cell("synthetic:tiny", None),
    md("## 2. 设备 · The device\nThe memory summary of this kernel's device, before anything is loaded: on CUDA the allocator pool is empty and the device's used memory is the CUDA context."),
    code('println!("{}", vram_lab::notebook::device_summary("auto")?);'),
    md("## 3. 显卡预设 · Card presets\nWhat `--card` / `Setup`'s card emulates: the capacity the driver reports on that card, and its memory bandwidth (the ceiling of decode speed)."),
    code('vram_lab::notebook::card_table()?.show("Card presets / 显卡预设")?;'),
    md("## 4. 模型预设 · Model presets\nEach `synthetic:<preset>` has the real checkpoint's tensor names and shapes; its weight bytes follow from the config alone."),
    code('vram_lab::notebook::preset_table()?.show("Qwen2.5 presets: weights by precision / 各精度权重大小")?;'),
    md("""
## 练习 · Exercises

**练习 1.** Qwen2.5-14B 有 14,770,033,664 个参数。BF16 每个参数 2 字节:权重占多少 GiB?
Qwen2.5-14B has 14,770,033,664 parameters at 2 bytes each in BF16: how many GiB of weights?
"""),
    code("""
let my_answer_gib = 0.0; // ← 填入你的答案 / your answer
let expected = vram_lab::estimate::weight_bytes(&Qwen2Config::preset("qwen2.5-14b")?, Precision::Bf16) as f64 / (1u64 << 30) as f64;
println!("{}", check_answer("练习 1 / exercise 1", my_answer_gib, expected, 0.01));
"""),
    md("""
**练习 2.** 在上面的显卡预设中,有几张卡能放下 Qwen2.5-7B 的 BF16 权重(仅权重,14.19 GiB)?
How many of the card presets above can hold Qwen2.5-7B's BF16 weights alone (14.19 GiB)?
"""),
    code("""
let my_answer_cards = 0.0; // ← 填入你的答案 / your answer
let w = vram_lab::estimate::weight_bytes(&Qwen2Config::preset("qwen2.5-7b")?, Precision::Bf16);
let fits = Card::presets().iter().filter(|c| c.total_bytes() > w).count();
println!("{}", check_answer("练习 2 / exercise 2", my_answer_cards, fits as f64, 0.0));
"""),
])

NB["01_anatomy"] = notebook([
    md("""
# 01 显存解剖 · VRAM anatomy: BF16, Q4, FP32

**目标 Goal.** 加载 Qwen2.5-7B,分别用 BF16、4-bit、FP32,在 24 GB 显卡上观察 Allocated / Reserved / Peak,并让 FP32 触发 OOM。
Load Qwen2.5-7B in BF16, 4-bit and FP32 on a 24 GB card, read allocated / reserved / peak memory
after loading and after generating 200 tokens, and watch FP32 run out of memory.

**报告的数字 The report's figures** (RTX 4090, PyTorch + transformers):
BF16 14.19 / 14.21 / 14.19 GB after loading; Int4 (bitsandbytes) 5.46 / 6.71 / 6.59 GB; FP32: OOM
"Tried to allocate 2.03 GiB" with 22.30 GiB in use.

**操作 Procedure.** `vram-lab anatomy --model synthetic:qwen2.5-7b --card rtx4090`: for each
precision, snapshot → load → snapshot → generate 200 tokens (EOS ignored) → snapshot, FP32 last.
The replayed run is that command on an NVIDIA H200 that emulates the RTX 4090's 23.52 GiB.
"""),
    code(DEP),
    code(USE),
    setup_cell("synthetic:qwen2.5-7b", "rtx4090"),
    code("let (table, timeline): (Table, Table) = setup.anatomy()?;"),
    md("## 观察 · Observation: memory after loading (GiB)\nPrediction (config × bytes per weight), this run, and the report side by side."),
    code("""
table.show_columns(&["precision", "outcome", "predicted_weights_gib", "loaded_allocated_gib", "weights_vs_predicted_pct",
    "loaded_reserved_gib", "loaded_peak_gib", "report_allocated_gib", "report_reserved_gib", "report_peak_gib",
    "pytorch_h200_allocated_gib"], "Stage 1 — after loading (GiB)")?;
"""),
    code('show_chart(&charts::anatomy(&table.df()?)?, "anatomy");'),
    md("""
## 解读 · Interpretation

- **BF16 = 参数 × 2 字节.** 7,615,616,512 × 2 B = 14.185 GiB; the pool holds exactly that. The
  report's 14.19 is the same number rounded (its analysis guide expects "about 14.5 GB": that
  guess is off, the weights alone are 14.19). PyTorch on the H200 holds 14.227 GiB, about 43 MiB more
  than the parameters: what transformers keeps beside them, which this lab does not take apart.
- **Q4 ≠ bitsandbytes Int4.** The lab's Q4 is GGUF Q4_K (4.5 bits per weight, scales included)
  for every matrix, Q6_K for the output layer: 4.12 GiB. bitsandbytes' `load_in_4bit` quantizes
  only the transformer blocks' linear layers and keeps the embedding and lm_head in BF16
  (2 × 152,064 × 3,584 × 2 B = 2.03 GiB); its 6.53 billion block weights take 3.04 GiB at 4 bits
  plus 0.38 GiB of FP32 scales (one per 64 weights): 5.45 GiB, the report's 5.46 GB.
- **FP32 needs 28.37 GiB**, more than the card's 23.52: the load stops with the allocator saying
  how much it asked for. The report's 2.03 GiB request is one vocabulary-sized matrix in FP32
  (152,064 × 3,584 × 4 B); here the layers are loaded in module order, so the request that fails is
  a 259 MiB MLP matrix of layer 23.
"""),
    md("## 观察 · Observation: after generating, and speed\nDecode speed beside its ceiling: the memory bandwidth over the bytes read per token (all weights + the KV cache)."),
    code("""
table.show_columns(&["precision", "after_allocated_gib", "after_reserved_gib", "after_peak_gib", "kv_act_delta_mib", "kv_cache_mib",
    "prefill_tok_s", "decode_tok_s", "decode_ceiling_tok_s", "oom_request_mib", "oom_during"], "Stage 1 — generation")?;
"""),
    md("The memory summary captured at the FP32 OOM (the counterpart of `torch.cuda.memory_summary()`):"),
    code('println!("{}", setup.oom_summary()?);'),
    code('show_chart(&charts::timeline(&timeline.df()?)?, "timeline");'),
    md("""
## 解读 · Interpretation

- **After generating, allocated is back at the weights**: the KV cache of 360 tokens
  (57,344 B per token in BF16, 19.7 MiB) is freed when generation ends; the peak keeps it, with the
  transient activations. The report's +0.01 GB after inference is the same story.
- **Reserved − allocated** is what the allocator keeps cached for reuse; candle's stream-ordered
  pool returns freed memory to the driver at the next synchronisation, so it stays small.
- **Speed.** Decoding one token reads every weight once, so tokens/s ≤ bandwidth ÷ weight bytes.
  The report's 38 tok/s on an RTX 4090 (1,008 GB/s ÷ 15.2 GB ≈ 66 tok/s ceiling) and this run's
  figure on the H200 (4.8 TB/s) sit below their ceilings by the kernels' efficiency.
"""),
    md("""
## 练习 · Exercises

**练习 1.** 用配置算出 Qwen2.5-7B 的 FP32 权重字节数(GiB)。Compute Qwen2.5-7B's FP32 weight size in GiB from its parameter count.
"""),
    code("""
let my_fp32_gib = 0.0; // ← 你的答案 / your answer
let expected = vram_lab::estimate::weight_bytes(&Qwen2Config::preset("qwen2.5-7b")?, Precision::F32) as f64 / (1u64 << 30) as f64;
println!("{}", check_answer("练习 1 / exercise 1", my_fp32_gib, expected, 0.01));
"""),
    md("""
**练习 2.** 报告的 FP32 OOM 想分配 2.03 GiB。这是哪个张量?给出它的元素个数(vocab × hidden)。
The report's FP32 OOM asked for 2.03 GiB. Which tensor is that? Give its element count.
"""),
    code("""
let my_elements = 0.0; // ← 你的答案 / your answer
let cfg = Qwen2Config::preset("qwen2.5-7b")?;
println!("{}", check_answer("练习 2 / exercise 2", my_elements, (cfg.vocab_size * cfg.hidden_size) as f64, 0.0));
"""),
    md("""
**练习 3.** 在 RTX 4090(1,008 GB/s)上,BF16 解码速度的物理上限是多少 tok/s?(带宽 ÷ 权重字节)
What is the decode ceiling in tokens/s of the BF16 model on an RTX 4090 (1,008 GB/s ÷ weight bytes)?
"""),
    code("""
let my_ceiling = 0.0; // ← 你的答案 / your answer
let bytes = vram_lab::estimate::weight_bytes(&Qwen2Config::preset("qwen2.5-7b")?, Precision::Bf16);
println!("{}", check_answer("练习 3 / exercise 3", my_ceiling, vram_lab::estimate::decode_ceiling_tok_s(1008.0, bytes), 0.03));
"""),
])

NB["02_kv_cache"] = notebook([
    md("""
# 02 KV Cache 的线性增长 · The KV cache, byte by byte

**目标 Goal.** 固定 batch = 1,序列长度从 1k 翻倍直到 OOM,看显存如何增长;再找到这张卡真正能放下的最长上下文。
Batch fixed at 1, double the sequence from 1k until OOM; then find the longest context the card
really holds, and attribute every byte held to the KV cache, the logits or the rest.

**报告的数字 The report's figures** (RTX 4090): "KV Cache 增量" 362.12 / 352.50 / 705.50 / 1412.00 MB
at 1k / 2k / 4k / 8k, OOM at 16,384 with 17.94 GB allocated; its formula 2 × Layers × Hidden × Seq × Batch × Bytes.

**操作 Procedure.** `vram-lab kv --card rtx4090 --precision bf16|q4 --logits all|last`: a prefill
of random ids per length from an empty preallocated cache, memory read before and after, the
output (cache and logits) held as `model(input_ids)` holds it; after the first OOM, bisection to
within 256 tokens. Then a long decode, and a batch sweep.
"""),
    code(DEP),
    code(USE),
    setup_cell("synthetic:qwen2.5-7b", "rtx4090"),
    code("let (prefill, _): (Table, Option<Table>) = setup.kv_prefill(\"bf16\", Logits::All)?;"),
    md("## 观察 · Observation: the prefill ledger (BF16, all logits kept, MiB)"),
    code("""
prefill.show_columns(&["seq", "outcome", "held_mib", "growth_per_1k_tokens_mib", "kv_measured_mib", "kv_gqa_formula_mib",
    "kv_naive_formula_mib", "logits_mib", "other_mib", "transient_mib", "peak_mib", "prefill_tok_s", "oom_request_mib"],
    "Stage 2 — prefill ledger, BF16")?;
"""),
    code('show_chart(&charts::kv_prefill(&prefill.df()?)?, "kv_prefill");'),
    md("""
## 解读 · Interpretation

- **The report's formula ignores grouped-query attention.** Qwen2.5-7B has 28 query heads but
  4 KV heads of 128: its BF16 cache is 2 × 28 × 4 × 128 × 2 = **57,344 B per token**, 7× less than
  2 × 28 × 3,584 × 2 = 401,408 B. The measured cache matches the GQA formula.
- **Most of the report's "KV Cache 增量" is logits.** `model(input_ids)` keeps the logits of every
  position: 152,064 × 2 B = 304,128 B per token. KV + logits = 361,472 B per token =
  **353.0 MiB per 1k tokens**, which is the report's 352.5 MB per added 1k.
- **OOM at 16,384, as the report.** At 16k the logits alone are 4.6 GiB; with the weights that no
  longer fits the 23.52 GiB card. The bisection finds the true limit just below.
"""),
    md("## 真正的上限 · The longest context that fits (tokens)"),
    code("""
match setup.kv_limits()? {
    Some(limits) => limits.show("max context on the card / 最长上下文")?,
    None => println!("no sweep ran out of memory on this device: no limit to bisect"),
}
"""),
    md("""
Without all-position logits (what generation needs) the limit moves from ~16k to ~32k tokens:
the peak then comes from the MLP's activations ([seq, 18,944] per matrix) during prefill, not the
cache. Q4 frees ~10 GiB of weights but computes in F32: its KV cache (114,688 B per token) and
activations are twice BF16's, so its limit is about the same.
"""),
    md("## 注意力的临时显存 · Attention's transient memory\nStock candle-transformers repeats K/V for every query head and materialises the full score matrix (28 × S² × 2 B): on this card it stops near 6k tokens. The lab's bounded attention computes scores in query chunks."),
    code("""
let (naive, _): (Table, Option<Table>) = setup.kv_naive()?;
naive.show_columns(&["seq", "outcome", "held_mib", "transient_mib", "peak_mib", "oom_request_mib"], "naive attention, BF16, all logits")?;
"""),
    md("## 解码 · A long decode: preallocated vs concatenating cache (MiB)"),
    code("""
let decode: Table = setup.kv_decode("bf16")?;
decode.show_columns(&["cache", "tokens", "allocated_mib", "ledger_mib", "ledger_vs_allocated_pct", "kv_mib", "reserved_mib",
    "peak_above_allocated_mib", "tok_s"], "decode ledger")?;
"""),
    code('show_chart(&charts::kv_decode(&decode.df()?)?, "kv_decode");'),
    md("""
The preallocated cache (the related article's KVCacheManager) takes its full size at once and
never moves; the concatenating cache grows by 57,344 B per token but copies the whole cache every
step, so its peak rises above what it holds by one layer's K (or V), and the pool keeps more reserved.
The ledger (weights + cache + one step's logits) sums to the measured allocated memory.
"""),
    md("## Batch 扫描 · Batch sweep at 1,024 tokens (all logits kept)"),
    code("""
let batch: Table = setup.kv_batch("bf16")?;
batch.show_columns(&["batch", "outcome", "held_mib", "kv_measured_mib", "logits_mib", "peak_mib", "prefill_tok_s"], "batch sweep")?;
"""),
    md("""
## 练习 · Exercises

**练习 1.** Qwen2.5-72B(80 层、8 个 KV 头、head_dim 128)在 BF16 下每个 token 的 KV cache 是多少字节?
How many bytes of KV cache does one token of Qwen2.5-72B take in BF16?
"""),
    code("""
let my_bytes = 0.0; // ← 你的答案 / your answer
let cfg = Qwen2Config::preset("qwen2.5-72b")?;
println!("{}", check_answer("练习 1 / exercise 1", my_bytes, vram_lab::estimate::kv_bytes_per_token(&cfg, 2) as f64, 0.0));
"""),
    md("""
**练习 2.** 报告的公式 2 × L × Hidden × Bytes 对 Qwen2.5-7B 高估了几倍?
By what factor does the report's formula overestimate Qwen2.5-7B's KV cache?
"""),
    code("""
let my_factor = 0.0; // ← 你的答案 / your answer
let cfg = Qwen2Config::preset("qwen2.5-7b")?;
let f = vram_lab::estimate::naive_kv_bytes_per_token(&cfg, 2) as f64 / vram_lab::estimate::kv_bytes_per_token(&cfg, 2) as f64;
println!("{}", check_answer("练习 2 / exercise 2", my_factor, f, 0.0));
"""),
    md("""
**练习 3.** 保留所有位置的 logits 时,BF16 下每增加 1,024 个 token 显存增加多少 MiB?
With all-position logits kept, how many MiB does each added 1,024 tokens cost in BF16?
"""),
    code("""
let my_mib = 0.0; // ← 你的答案 / your answer
let cfg = Qwen2Config::preset("qwen2.5-7b")?;
let per_token = vram_lab::estimate::kv_bytes_per_token(&cfg, 2) + vram_lab::estimate::logits_bytes_per_token(&cfg, 2);
println!("{}", check_answer("练习 3 / exercise 3", my_mib, (1024 * per_token) as f64 / (1u64 << 20) as f64, 0.01));
"""),
])

out = Path(__file__).resolve().parent.parent / "notebooks"
out.mkdir(exist_ok=True)
for name, nb in NB.items():
    (out / f"{name}.ipynb").write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n")
    print("wrote", out / f"{name}.ipynb")
