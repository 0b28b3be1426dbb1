//! The estimator check's tables: their columns, the CSVs' names, the views.

use crate::stage::View;

pub mod col {
    pub const FILE: &str = "file";
    pub const DEVICE: &str = "device";
    pub const PRECISION: &str = "precision";
    pub const LOGITS: &str = "logits";
    pub const ATTENTION: &str = "attention";
    pub const SEQ: &str = "seq";
    pub const BATCH: &str = "batch";
    pub const ALLOCATED_MIB: &str = "allocated_mib";
    pub const PREDICTED_ALLOCATED_MIB: &str = "predicted_allocated_mib";
    pub const ALLOCATED_ERR_PCT: &str = "allocated_err_pct";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const PREDICTED_PEAK_MIB: &str = "predicted_peak_mib";
    pub const PEAK_ERR_PCT: &str = "peak_err_pct";
    pub const TRANSIENT_MIB: &str = "transient_mib";
    pub const PREDICTED_TRANSIENT_MIB: &str = "predicted_transient_mib";
    pub const PEAK_AT: &str = "peak_at";
    pub const CARD: &str = "card";
    pub const MAX_CONTEXT: &str = "max_context";
    pub const PREDICTED_MAX_CONTEXT: &str = "predicted_max_context";
    pub const CONTEXT_ERR_PCT: &str = "context_err_pct";
    pub const OOM_RETRY: &str = "oom_retry";
    pub const CHECK: &str = "check";
    pub const CHECKS: &str = "checks";
    pub const WITHIN: &str = "within_tolerance";
    pub const TOLERANCE: &str = "tolerance";
    pub const WORST_ERR_PCT: &str = "worst_err_pct";
    pub const WORST_CASE: &str = "worst_case";
    pub const NOTE: &str = "note";
    pub const PRESET: &str = "preset";
    pub const TYPE: &str = "type";
    pub const FLAGS: &str = "flags";
    pub const MODEL_MIB: &str = "model_mib";
    pub const PREDICTED_MODEL_MIB: &str = "predicted_model_mib";
    pub const KV_MIB: &str = "kv_mib";
    pub const PREDICTED_KV_MIB: &str = "predicted_kv_mib";
    pub const COMPUTE_MIB: &str = "compute_mib";
    pub const PREDICTED_COMPUTE_MIB: &str = "predicted_compute_mib";
    pub const SELF_MIB: &str = "self_mib";
    pub const PREDICTED_SELF_MIB: &str = "predicted_self_mib";
    pub const ERR_MIB: &str = "err_mib";
    pub const ERR_PCT: &str = "err_pct";
    pub const NVIDIA_SMI_MIB: &str = "nvidia_smi_mib";
    pub const OUTSIDE_MIB: &str = "outside_buffers_mib";
    pub const PREDICTED_NVIDIA_SMI_MIB: &str = "predicted_nvidia_smi_mib";
    pub const NVIDIA_SMI_ERR_MIB: &str = "nvidia_smi_err_mib";
    pub const DTYPE: &str = "dtype";
    pub const CARD_MIB: &str = "card_mib";
    pub const OUTCOME: &str = "outcome";
    pub const PREDICTED_OUTCOME: &str = "predicted_outcome";
    pub const RESERVED_MIB: &str = "reserved_mib";
    pub const PREDICTED_RESERVED_MIB: &str = "predicted_reserved_mib";
    pub const RESERVED_ERR_PCT: &str = "reserved_err_pct";
}

pub const SUMMARY: &str = "check_summary";

pub const PREFILL: &str = "check_prefill";

pub const LIMITS: &str = "check_limits";

/// llama.cpp's buffers per launch beside `estimate --engine llama.cpp`.
pub const LLAMACPP: &str = "check_llamacpp";

/// llama.cpp's buffers on each GPU of a launch over several (`-ts`).
pub const LLAMACPP_DEVICES: &str = "check_llamacpp_devices";

/// transformers' memory per length of the report's sweep beside `estimate --engine transformers`.
pub const TRANSFORMERS: &str = "check_transformers";

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "summary",
            table: SUMMARY,
            caption: "Estimator check — the summary: how many checks, how many within tolerance, the worst miss",
            columns: &[CHECK, CHECKS, WITHIN, TOLERANCE, WORST_ERR_PCT, WORST_CASE, NOTE],
            group_by: &[],
            chart: None,
            explain: "每一类检查:做了多少次、多少次落在容差内、最差的一次差多少以及是哪一次。字节类(权重、已分配、峰值)的容差是 3 %;最长上下文是 2 % 或一个二分步长(取较大者)。加入 OOM 重试之前的运行按设计会偏离:那时撞到显卡上限的是内存池映射的内存,而不是活跃的字节。下面是逐行明细。<br>Each kind of check: how many were made, how many landed within the tolerance, and the worst miss with the case it came from. The bytes (weights, allocated, peak) are held to 3 %; a longest context to 2 % or one bisection step, whichever is coarser. The runs before the OOM retry miss by design: the pool's mapped memory, not the live bytes, hit the card. Every row follows below.",
        },
        View {
            name: "prefill",
            table: PREFILL,
            caption: "Estimator check — allocated and peak, measured vs the formula (MiB)",
            columns: &[PRECISION, LOGITS, ATTENTION, SEQ, BATCH, ALLOCATED_MIB, PREDICTED_ALLOCATED_MIB, ALLOCATED_ERR_PCT, PEAK_MIB, PREDICTED_PEAK_MIB, PEAK_ERR_PCT, TRANSIENT_MIB, PREDICTED_TRANSIENT_MIB, PEAK_AT],
            group_by: &[FILE],
            chart: None,
            explain: "allocated = the weights, candle's quantized-matmul buffer (Q4: 21,312 B per token of the longest prefill the process ran, kept for good, and 16 MiB), the KV cache and the logits a prefill leaves (loads: the weights alone); peak adds the transient the formula counts tensor by tensor at the forward's busiest moment (peak_at; `workspace`: a Q4 prefill longer than any before grows the buffer in its first down projection, old and new live together). The sweeps are replayed in the order the process ran them. 已分配与峰值:实测 vs 公式(Q4 含 candle 量化矩阵乘的常驻缓冲)。",
        },
        View {
            name: "limits",
            table: LIMITS,
            caption: "Estimator check — the longest context, bisected vs the ledger",
            columns: &[CARD, PRECISION, LOGITS, ATTENTION, BATCH, MAX_CONTEXT, PREDICTED_MAX_CONTEXT, CONTEXT_ERR_PCT, OOM_RETRY],
            group_by: &[FILE],
            chart: None,
            explain: "predicted_max_context: the KV stage's own search (the same doubling lengths, the same bisection grid) run on the ledger, the card's total less the runtime outside the pool. The ledger counts the pool's chunks: CUDA's pool maps 32 MiB at a time and after a trim keeps every chunk a live allocation touches: 25.1 MiB per chunk of live allocations (each counted up to a chunk) at the traced worst layer (data/results/h200/2026-11-23-pool). With oom_retry (a failed request retried after the pool is trimmed, as PyTorch retries after releasing its cache) the bisections land within about 1 % of it, whether the edge is the logits, the attention or the MLP, on an RTX 4090 and an A4000, 7B and 3B; the A4000's BF16 edge at 3,584 tokens is one bisection step (7 %) above; the same command in two processes differed by one step (24,064 and 24,320). Runs before the retry stopped where the pool's mapped memory hit the card: 16,128 tokens instead of 24,064. 最长上下文:同一搜索在账本上的结果(计入内存池 32 MiB 分块的余量);失败后整理内存池再重试,误差约 1 %(A4000 BF16 短上下文差一个二分步长)。",
        },
        View {
            name: "llamacpp",
            table: LLAMACPP,
            caption: "Estimator check — llama.cpp's own GPU buffers per launch beside `estimate --engine llama.cpp` (MiB)",
            columns: &[FILE, PRESET, TYPE, FLAGS, MODEL_MIB, PREDICTED_MODEL_MIB, KV_MIB, PREDICTED_KV_MIB, COMPUTE_MIB, PREDICTED_COMPUTE_MIB, SELF_MIB, PREDICTED_SELF_MIB, ERR_MIB, ERR_PCT, NVIDIA_SMI_MIB, OUTSIDE_MIB, PREDICTED_NVIDIA_SMI_MIB, NVIDIA_SMI_ERR_MIB],
            group_by: &[],
            chart: None,
            explain: "每次 llama.cpp 启动:它日志里打印的 GPU 模型缓冲、KV 缓冲、计算缓冲,旁边是估算器对同一模型同一组参数的预测,以及 nvidia-smi 看到的整个进程显存(多出来的是 CUDA 上下文、cuBLAS 和 llama.cpp 的临时池)。<br>Each llama.cpp launch: the GPU's model, KV and compute buffers as its log printed them, beside the estimate for the same model and flags, and the whole process as nvidia-smi listed it beside its prediction (beyond the buffers: the CUDA context with its kernels, cuBLAS once used, and ggml-cuda's scratch pool at the launch's own prompt; the H200's constants).",
        },
        View {
            name: "llamacpp_devices",
            table: LLAMACPP_DEVICES,
            caption: "Estimator check — llama.cpp over several GPUs: each GPU's buffers beside `estimate --engine llama.cpp --ts` (MiB)",
            columns: &[FILE, DEVICE, MODEL_MIB, PREDICTED_MODEL_MIB, KV_MIB, PREDICTED_KV_MIB, COMPUTE_MIB, PREDICTED_COMPUTE_MIB, NVIDIA_SMI_MIB, PREDICTED_NVIDIA_SMI_MIB],
            group_by: &[],
            chart: None,
            explain: "多卡启动(-sm layer -ts):每张 GPU 日志里的三块缓冲区和 nvidia-smi 的数字,旁边是估算。<br>Each GPU of a launch over several (`-sm layer -ts`): its three buffers as llama.cpp's log printed them and nvidia-smi's figure for the process on it, beside the estimate (each GPU with a CUDA context, cuBLAS and a scratch pool of its own).",
        },
            View {
            name: "transformers",
            table: TRANSFORMERS,
            caption: "Estimator check — transformers in the report's KV-cache sweep beside `estimate --engine transformers` (MiB)",
            columns: &[FILE, PRESET, DTYPE, CARD_MIB, SEQ, OUTCOME, PREDICTED_OUTCOME, ALLOCATED_MIB, PREDICTED_ALLOCATED_MIB, ALLOCATED_ERR_PCT, PEAK_MIB, PREDICTED_PEAK_MIB, PEAK_ERR_PCT, RESERVED_MIB, PREDICTED_RESERVED_MIB, RESERVED_ERR_PCT],
            group_by: &[],
            chart: None,
            explain: "报告的 KV 缓存扫描脚本(scripts/reference/transformers_memory.py)在 GPU 上逐长度实测的 PyTorch 已分配、峰值和保留显存,旁边是估算器把同一扫描逐个请求重放给 PyTorch 缓存分配器模型的结果;seq 0 是加载之后。card_mib 0 表示整块 GPU。<br>The report's KV-cache sweep (scripts/reference/transformers_memory.py) measured on the GPU, length by length: PyTorch's allocated bytes after the forward (or, at an OOM, what was held when Python caught it), the peak and the reserved bytes, beside the estimate's replay of the same sweep, request by request, through its model of PyTorch's caching allocator. seq 0 is the load; card_mib 0 is the whole GPU.",
        },
    ]
}
