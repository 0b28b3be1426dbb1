//! The estimator's and the planner's tables: their columns, the CSVs' names, the views and charts
//! the report draws.

use crate::stage::{Axis, ChartSpec, Series, View};

pub mod col {
    pub const PRECISION: &str = "precision";
    pub const ITEM: &str = "item";
    pub const MIB: &str = "mib";
    pub const FORMULA: &str = "formula";
    pub const CARD: &str = "card";
    pub const CARD_MIB: &str = "card_mib";
    pub const NEED_MIB: &str = "need_mib";
    pub const FITS: &str = "fits";
    pub const HEADROOM_MIB: &str = "headroom_mib";
    pub const MAX_CONTEXT: &str = "max_context";
    pub const MAX_BATCH: &str = "max_batch";
    pub const BANDWIDTH_GBS: &str = "bandwidth_gb_s";
    pub const DECODE_CEILING: &str = "decode_ceiling_tok_s";
    pub const SEQ: &str = "seq";
    pub const NEED_GIB: &str = "need_gib";
    pub const SETUP: &str = "setup";
    pub const BYTES_PER_PARAM: &str = "bytes_per_param";
    pub const GIB_PER_GPU: &str = "gib_per_gpu";
    pub const RANK: &str = "rank";
    pub const NOTE: &str = "note";
    pub const WITHOUT_CHECKPOINTING_GIB: &str = "without_checkpointing_gib";
    pub const WITH_CHECKPOINTING_GIB: &str = "with_checkpointing_gib";
    pub const LAYOUT: &str = "layout";
    pub const GPU: &str = "gpu";
    pub const LAYERS: &str = "layers";
    pub const WEIGHTS_MIB: &str = "weights_mib";
    pub const KV_CACHE_MIB: &str = "kv_cache_mib";
    pub const TRANSIENT_MIB: &str = "transient_mib";
    pub const LOGITS_MIB: &str = "logits_mib";
    pub const NCCL_MIB: &str = "nccl_mib";
    pub const POOL_MIB: &str = "pool_mib";
    pub const RUNTIME_MIB: &str = "runtime_mib";
    pub const TOTAL_MIB: &str = "total_mib";
    pub const CARD_GIB: &str = "card_gib";
    pub const PLANNED_MICRO_BATCH: &str = "planned_micro_batch";
    pub const PLANNED_PEAK_GIB: &str = "planned_peak_gib";
    pub const EQUAL_MICRO_BATCH: &str = "equal_micro_batch";
    pub const EQUAL_PEAK_GIB: &str = "equal_peak_gib";
    pub const EQUAL_FITS: &str = "equal_fits";
    pub const DDP_GIB: &str = "ddp_every_gpu_gib";
    pub const DP_FIRST_GIB: &str = "data_parallel_first_gpu_gib";
    pub const DP_OTHER_GIB: &str = "data_parallel_other_gpus_gib";
    pub const MODEL: &str = "model";
    pub const DEVICE: &str = "device";
    pub const MODEL_MIB: &str = "model_mib";
    pub const CONTEXT_MIB: &str = "context_mib";
    pub const COMPUTE_MIB: &str = "compute_mib";
    pub const DTYPE: &str = "dtype";
    pub const BEFORE_GIB: &str = "before_gib";
    pub const AFTER_GIB: &str = "after_gib";
    pub const PEAK_GIB: &str = "peak_gib";
    pub const RESERVED_GIB: &str = "reserved_gib";
    pub const OUTCOME: &str = "outcome";
    pub const CACHE: &str = "cache";
    pub const NGL: &str = "ngl";
    pub const N_CPU_MOE: &str = "n_cpu_moe";
    pub const COMMAND: &str = "command";
    pub const PREDICTED_NVIDIA_SMI_MIB: &str = "predicted_nvidia_smi_mib";
}

pub const LEDGER: &str = "estimate_ledger";

pub const FIT: &str = "estimate_fit";

pub const CURVE: &str = "estimate_curve";

pub const TRAINING: &str = "estimate_training";

pub const TRAIN_STEP: &str = "estimate_train_step";

pub const TRAIN_CARDS: &str = "estimate_train_cards";

pub const TRAIN_DP: &str = "estimate_train_data_parallel";

pub const PLAN: &str = "plan";

/// The llama-server flags that fit a card (`plan --engine llama.cpp`).
pub const PLAN_LLAMACPP: &str = "plan_llamacpp";

/// llama-server's flags over several cards and each card's need (`plan --engine llama.cpp --cards`).
pub const PLAN_LLAMACPP_CARDS: &str = "plan_llamacpp_cards";

/// The planner over several cards: each card's share (`plan --cards`).
pub const PLAN_GPUS: &str = "plan_gpus";

pub const PARALLEL: &str = "estimate_parallel";

/// llama.cpp's buffers on the GPUs together and the host (`--engine llama.cpp`).
pub const LLAMACPP: &str = "estimate_llamacpp";

/// llama.cpp's buffers on each GPU (`cuda0`, `cuda1`, …) and the host, and what nvidia-smi lists
/// for each GPU.
pub const LLAMACPP_DEVICES: &str = "estimate_llamacpp_devices";

/// transformers' allocated, peak and reserved memory per length of the report's sweep
/// (`--engine transformers`).
pub const TRANSFORMERS: &str = "estimate_transformers";

/// Memory against context per precision, with each card's capacity as a line.
const CURVE_CHART: ChartSpec = ChartSpec {
    title: "显存 vs 上下文 memory against context",
    x: col::SEQ,
    x_title: "context, tokens (log scale)",
    y_title: "GiB",
    split_by: Some(col::PRECISION),
    x_axis: Axis::LogValues,
    series: &[Series::column("", &[(col::NEED_GIB, 1.0)])],
    lines: Some(card_lines),
    ..ChartSpec::LINES
};

/// Each card preset's capacity, GiB.
fn card_lines() -> Vec<(String, f64)> {
    crate::hw::Card::presets().into_iter().map(|c| (c.name.clone(), c.total_mib / 1024.0)).collect()
}

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "ledger",
            table: LEDGER,
            caption: "Estimator — the byte ledger per precision (MiB)",
            columns: &[ITEM, MIB, FORMULA],
            group_by: &[PRECISION],
            chart: None,
            explain: "Weights from the tensor list (Q4: the GGUF block plan), the KV cache with grouped-query attention, the logits kept, the prefill's transient counted tensor by tensor from the lab's forward (the attention chunk, the MLP's four intermediate tensors or the logits' final norm, whichever is largest), and the runtime outside the pool. 权重、KV 缓存(GQA)、logits、前向瞬时峰值、运行时开销。",
        },
        View {
            name: "fit",
            table: FIT,
            caption: "Estimator — fit table over the card presets",
            columns: &[CARD, CARD_MIB, NEED_MIB, FITS, HEADROOM_MIB, MAX_CONTEXT, MAX_BATCH, BANDWIDTH_GBS, DECODE_CEILING],
            group_by: &[PRECISION],
            chart: None,
            explain: "Headroom = the card's total less the ledger's total. The longest context (at the batch given) and the largest batch (at the context given) are the edge of the same ledger: one more token or sequence does not fit. The decode ceiling is the card's bandwidth ÷ (weights + the cache at this context): batch-1 decoding reads both once per token. The stream-ordered pool maps more than it hands out near the edge (see `vram-lab check`): keep a margin. 每张卡:能否装下、余量、最长上下文、最大批量、解码上限。",
        },
        View {
            name: "curve",
            table: CURVE,
            caption: "Estimator — memory against context (GiB)",
            columns: &[PRECISION, SEQ, NEED_GIB],
            group_by: &[],
            chart: Some(CURVE_CHART),
            explain: "每种精度的账本总量随上下文增长;曲线与某张卡的容量线(灰线,卡名标在右端)相交处,就是那张卡的最长上下文。纵轴只画到最大需求稍上方:容量更大的卡能放下图中每一个上下文,不再画出。<br>The ledger's total for each context, against each card's capacity (the grey lines, each card named at its right end): where a curve crosses a card is that card's longest context. The y axis stops a little above the largest need; a card larger than that holds every context shown and is left out.",
        },
        View {
            name: "training",
            table: TRAINING,
            caption: "Estimator — a training step per GPU, beside the articles' 16 B/parameter",
            columns: &[SETUP, ITEM, BYTES_PER_PARAM, GIB_PER_GPU, NOTE],
            group_by: &[],
            chart: None,
            explain: "Weights, gradients, the F32 master copy (mixed precision), the optimizer's states, and what ZeRO divides across GPUs; the step's activations and peak are the next table. 训练:权重、梯度、主权重、优化器状态,以及 ZeRO 的切分。",
        },
        View {
            name: "parallel",
            table: PARALLEL,
            caption: "Estimator — inference over several GPUs, per GPU (MiB)",
            columns: &[LAYOUT, GPU, LAYERS, WEIGHTS_MIB, KV_CACHE_MIB, TRANSIENT_MIB, LOGITS_MIB, NCCL_MIB, POOL_MIB, RUNTIME_MIB, TOTAL_MIB],
            group_by: &[PRECISION],
            chart: None,
            explain: "`--tp N`: every GPU holds its share of each layer's heads and MLP (q, k, v, gate, up by rows; o, down by columns: one all-reduce after each), its rows of an untied head (the logits gathered to every GPU), and the embedding and norms whole; the K/V heads are split too, so N must divide them. `--pp N`: whole layers per GPU, split so the weights are as even as whole layers allow, the embedding on the first and the head on the last. NCCL's own memory is the layout its log gave: 10 MiB a channel for each peer a GPU receives from, 2 MiB for each it sends to, over its ring and chain (two H100s: 1,120 MiB a GPU; four H200s: 1,164 to 1,404, within 0.4 %), and the lab's 2 MiB block for the one-kernel sum over peer memory; beyond four GPUs NCCL's choice of chains is assumed. The pool column is what the allocator maps beyond the live bytes at the busiest moment (its 32 MiB chunks), as the one-GPU ledger counts it. 多卡推理:张量并行与流水线,每张卡的权重、KV 缓存、瞬时峰值与 NCCL 缓冲。",
        },
        View {
            name: "llamacpp",
            table: LLAMACPP,
            caption: "Estimator — llama.cpp's buffers per device (MiB), --engine llama.cpp",
            columns: &[MODEL, DEVICE, MODEL_MIB, CONTEXT_MIB, COMPUTE_MIB, TOTAL_MIB],
            group_by: &[],
            chart: None,
            explain: "llama.cpp 自己分配的三块显存:模型权重(输入层的词嵌入留在主机内存,-ngl 之外的层也在主机)、KV 缓存(-c 向上取整到 256 个单元,按 -ctk/-ctv 的类型)、计算缓冲区(ggml 的分配器在预留的图上走一遍的最高水位:开启 flash attention 时通常是 logits 那一刻,关闭时是注意力分数矩阵)。CUDA 上下文和 llama.cpp 的临时池在这之外。<br>What llama.cpp allocates itself, as its memory breakdown prints it: the model (the token embedding stays in host memory, as do layers beyond -ngl), the KV cache (-c rounded up to 256 cells, in -ctk/-ctv) and the compute buffer (the high-water mark of ggml's allocator over the graph llama.cpp reserves: with flash attention usually the logits' moment, without it the attention scores). The CUDA context and llama.cpp's scratch pool come beside these.",
        },
        View {
            name: "llamacpp_devices",
            table: LLAMACPP_DEVICES,
            caption: "Estimator — llama.cpp on each GPU (MiB), --engine llama.cpp [--cards A,B --ts …]",
            columns: &[MODEL, DEVICE, MODEL_MIB, CONTEXT_MIB, COMPUTE_MIB, PREDICTED_NVIDIA_SMI_MIB],
            group_by: &[],
            chart: None,
            explain: "每张 GPU 上 llama.cpp 的三块缓冲区,以及 nvidia-smi 会列出的整个进程(再加 CUDA 上下文、cuBLAS 和临时池)。多卡时按 --split-mode layer:层按 -ts(默认每张卡的空闲显存)分配,输出层在最后一张卡;所有层都在 GPU 上时开启流水线并行,每段的输入保留 4 份。多卡部分尚未在多卡机器上实测。<br>Each GPU's three buffers and the process nvidia-smi would list for it (the CUDA context, cuBLAS and the scratch pool beside them). Over several GPUs, as `--split-mode layer` places them: layers by `-ts` (default each card's free memory), the output layer on the last; with every layer on the GPUs, pipeline parallelism keeps 4 copies of each split's inputs. Not yet measured on a machine of several GPUs.",
        },
        View {
            name: "transformers",
            table: TRANSFORMERS,
            caption: "Estimator — transformers' memory in the report's KV-cache sweep (GiB), --engine transformers",
            columns: &[DTYPE, SEQ, BEFORE_GIB, AFTER_GIB, PEAK_GIB, RESERVED_GIB, OUTCOME],
            group_by: &[],
            chart: None,
            explain: "报告的 KV 缓存扫描脚本在 transformers 下逐长度的显存:前向开始时(上一个长度的输出仍被 `_` 持有)、结束后、峰值、PyTorch 缓存分配器保留的总量,直到某个请求超出显卡。每个长度都保留全部位置的 logits(seq × 词表),所以 7B 模型在 16,384 个 token 时要一次申请 4.64 GiB。<br>The report's KV-cache sweep under transformers, length by length: allocated when the forward starts (the previous length's output still held by `_`), after it, the peak, and what PyTorch's caching allocator keeps reserved, until a request no longer fits the card. Every position's logits are kept (seq × vocab), which is the 4.64 GiB request a 7B model makes at 16,384 tokens.",
        },
        View {
            name: "train_step",
            table: TRAIN_STEP,
            caption: "Estimator — the lab's F32 training step at this batch and context, and PyTorch's (GiB)",
            columns: &[ITEM, WITHOUT_CHECKPOINTING_GIB, WITH_CHECKPOINTING_GIB, NOTE],
            group_by: &[],
            chart: None,
            explain: "The step `vram-lab train` runs (forward, backward, AdamW in F32), counted tensor by tensor from candle's forward and backward: what the forward keeps for the backward, the backward's busiest moment, the update's, and the peak the card must hold. Checked against the lab's measured steps (`vram-lab check`). The PyTorch rows count transformers' Qwen2 in F32 with SDPA and `torch.optim.AdamW` the same way (within 1.4 % of its steps measured on an H100). 训练一步的激活与峰值,有无梯度检查点;并列 PyTorch 的一步。",
        },
        View {
            name: "train_dp",
            table: TRAIN_DP,
            caption: "Estimator — PyTorch's DataParallel beside DDP: what each GPU holds over a step (GiB)",
            columns: &[ITEM, DDP_GIB, DP_FIRST_GIB, DP_OTHER_GIB, NOTE],
            group_by: &[],
            chart: None,
            explain: "The related articles: DataParallel fills the first GPU, DDP balances. DDP runs a process per GPU, each with the whole model, its gradients and AdamW's moments. DataParallel keeps the module, the summed gradients and the moments on the first GPU, copies the weights to the others at every forward and gathers every replica's logits on the first. Counted as the articles count a step (weights + gradients + states + activations), the activations as PyTorch keeps them (F32, SDPA). Not measured here: the lab's own data-parallel runs are DDP-like (`vram-lab train --gpus N`). DataParallel 第一张卡更满(优化器状态与汇总的 logits),DDP 每张卡一样。",
        },
        View {
            name: "train_cards",
            table: TRAIN_CARDS,
            caption: "Estimator — unequal cards under data parallelism: each card's micro-batch",
            columns: &[CARD, CARD_GIB, PLANNED_MICRO_BATCH, PLANNED_PEAK_GIB, EQUAL_MICRO_BATCH, EQUAL_PEAK_GIB, EQUAL_FITS, NOTE],
            group_by: &[],
            chart: None,
            explain: "Under data parallelism every card holds the whole model, its gradients and AdamW states; only the micro-batch can differ. Planned: the largest micro-batch each card holds (the articles' table: a 24 GB card 8, a 16 GB card 4). Equal: the same global batch split evenly — the smaller card runs out first. 数据并行时每张卡都持有完整模型、梯度和优化器状态,只有微批大小可以不同:按卡规划的微批与平均切分对比。",
        },
    ]
}

/// The planner's views.
pub fn plan_views() -> Vec<View> {
    use col::*;
    vec![View {
        name: "plan",
        table: PLAN,
        caption: "Planner — per precision on the card (batch 1 unless said)",
        columns: &[RANK, PRECISION, NEED_MIB, FITS, HEADROOM_MIB, MAX_CONTEXT, MAX_BATCH, DECODE_CEILING],
        group_by: &[],
        chart: None,
        explain: "need = the ledger's total at the context wanted (batch 1, last-token logits, the runtime's overhead included); over several cards, the largest card's. The decode ceiling is the card's bandwidth ÷ bytes read per token; stage 1 measures how close the lab's decoding comes to it on a GPU. 每种精度:所需显存、最长上下文、最大批量和解码上限。",
    }, View {
        name: "plan_llamacpp",
        table: PLAN_LLAMACPP,
        caption: "Planner — llama-server's flags that fit the card with the margin left free, --engine llama.cpp",
        columns: &[MODEL, CACHE, NGL, N_CPU_MOE, SEQ, NEED_MIB, CARD_MIB, COMMAND],
        group_by: &[],
        chart: None,
        explain: "每种量化与 KV 缓存类型:所有层放进显卡时能开到的最长上下文(-c),放不下整个模型时在想要的上下文下:混合专家模型把最少几层的专家留在主机内存(--n-cpu-moe),其余模型放进最多的层数(-ngl);need 是 nvidia-smi 会显示的整个进程(llama.cpp 的缓冲区、CUDA 上下文、cuBLAS、临时池,按填满上下文的提示词计),卡的容量减去余量以内。<br>Per type and KV-cache type: every layer on the GPU at the longest context (-c) that fits, or, when the model does not fit whole, at the context wanted: for a mixture of experts the fewest layers whose experts stay in host memory (--n-cpu-moe), else the most layers (-ngl). need is the whole process as nvidia-smi would list it (llama.cpp's buffers, the CUDA context, cuBLAS, the scratch pool, after a prompt filling the context), within the card less the margin.",
    }, View {
        name: "plan_llamacpp_cards",
        table: PLAN_LLAMACPP_CARDS,
        caption: "Planner — llama-server over several cards (--split-mode layer), each card's need, --engine llama.cpp --cards",
        columns: &[MODEL, CACHE, DEVICE, SEQ, NEED_MIB, CARD_MIB, COMMAND],
        group_by: &[],
        chart: None,
        explain: "每种量化与 KV 缓存类型:所有层放在这几张卡上(--split-mode layer)时能开到的最长上下文,以及让它最长的 -ts(从每张卡的预算出发,把层移向还有余量的卡);每张卡的 need 是 nvidia-smi 会显示的量,卡的容量减去余量以内。尚未在多卡机器上实测。<br>Per type and KV-cache type: every layer on the cards (`--split-mode layer`) at the longest context, with the `-ts` that reaches it (from each card's budget as its share, layers moved toward the cards with room left); each card's need is what nvidia-smi would list, within the card less the margin. Not yet measured on a machine of several GPUs.",
    }, View {
        name: "plan_gpus",
        table: PLAN_GPUS,
        caption: "Planner — each card's share of the pipeline (llama.cpp's --split-mode layer: the token embedding in host memory, the output layer on the last card's slot)",
        columns: &[PRECISION, GPU, CARD, LAYERS, WEIGHTS_MIB, KV_CACHE_MIB, TRANSIENT_MIB, LOGITS_MIB, POOL_MIB, RUNTIME_MIB, NEED_MIB, CARD_MIB, FITS],
        group_by: &[],
        chart: None,
        explain: "Each card's layers as llama.cpp assigns them (--tensor-split, default each card's memory), its weights tensor by tensor, its share of the KV cache, the forward's transient (candle's quantized-matmul buffer included: one per device), the logits on the output's card, the pool's chunks beyond the live bytes, and the runtime. 多卡流水线:每张卡的层、权重、KV 与瞬时显存。",
    }]
}
