//! 你的答案写在这里。/ Your answers go here.
//!
//! 把每个 `todo!(…)` 换成计算,然后运行 `cargo test -p exercises`:每个练习一个测试,
//! 在你看不到的配置上和实验室的函数比较。签名不要改。
//! Replace each `todo!(…)` with the computation, then run `cargo test -p exercises`: one test per
//! exercise compares your function with the lab's on configs you do not see. Keep the signatures.
//!
//! 所有字节数用 u64(乘法前先转成 u64,别用 f64 算字节)。
//! Every byte count is a u64 (no f64 for bytes: it rounds above 2^53).
#![allow(unused_variables, clippy::too_many_arguments)]

/// **练习 1(笔记本 01)· 参数个数。** Qwen2 稠密模型的参数总数。
/// 输入:词表 `vocab`、隐藏维度 `hidden`、MLP 宽度 `intermediate`、层数 `layers`、
/// Q 头数 `heads`、KV 头数 `kv_heads`、输入嵌入与输出层是否共享 `tied`。
/// 提示:`head_dim = hidden / heads`,`kv = kv_heads × head_dim`。每层:q_proj 权重 hidden × hidden
/// 加偏置 hidden;k_proj、v_proj 各 kv × hidden 加偏置 kv;o_proj hidden × hidden(无偏置);
/// gate、up、down 各 intermediate × hidden;两个 RMSNorm 各 hidden。层外:嵌入 vocab × hidden、
/// 最后的 norm hidden,不共享时再加输出层 vocab × hidden。Qwen2.5-7B:7,615,616,512。
///
/// **Exercise 1 (notebook 01) · Parameter count** of a dense Qwen2 model, from its vocabulary,
/// hidden size, MLP width, layers, query heads, key/value heads, and whether the output layer is
/// the embedding table (`tied`). Hint: `head_dim = hidden / heads`, `kv = kv_heads × head_dim`.
/// A layer: q_proj hidden × hidden plus a bias of hidden; k_proj and v_proj kv × hidden plus a bias
/// of kv each; o_proj hidden × hidden (no bias); gate, up and down intermediate × hidden each; two
/// RMS norms of hidden. Outside the layers: the embedding vocab × hidden, the final norm hidden, and
/// unless tied the output layer vocab × hidden. Qwen2.5-7B: 7,615,616,512.
pub fn param_count(
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    tied: bool,
) -> u64 {
    todo!("练习 1 / exercise 1: param_count")
}

/// **练习 2(笔记本 01)· 解码速度上限。** 一步解码从显存读一遍它需要的字节,所以
/// tokens/s ≤ 带宽 ÷ 每步读的字节;`batch` 条序列一步各出一个 token,返回所有序列合计的 tokens/s。
/// 输入:带宽 `bandwidth_gb_s`(GB/s,1 GB = 1e9 B)、权重字节 `weight_bytes`、嵌入表字节
/// `embedding_bytes`、`tied`、每 token 的 KV 字节 `kv_bytes_per_token`、每条序列已有的上下文
/// `context`(token)、`batch`。
/// 提示:每步读的字节 = 全部权重 − 嵌入表(不共享时:每个 token 只查一行;共享时嵌入表就是输出层,
/// 要整个读)+ 每条序列的 KV cache(kv × context × batch)。结果 = batch × 带宽 × 1e9 ÷ 字节数。
/// 例:RTX 4090(1,008 GB/s)、7B BF16、context 0、batch 1:1008e9 ÷ 14,141,238,272 ≈ 71.3 tok/s。
///
/// **Exercise 2 (notebook 01) · The decode ceiling.** A decoding step reads what it needs
/// from device memory once, so tokens/s ≤ bandwidth ÷ bytes read per step; `batch` sequences each
/// gain one token a step: return the tokens/s of all of them together. Inputs: the bandwidth in
/// GB/s (1e9 B/s), the weights' bytes, the embedding table's bytes, `tied`, the KV cache bytes per
/// token, each sequence's context so far (tokens), the batch. Hint: bytes read per step = every
/// weight − the embedding table (untied: a token looks up one row; tied: the table is the output
/// layer and is read whole) + every sequence's cache (kv × context × batch). The ceiling is
/// batch × bandwidth × 1e9 ÷ those bytes. RTX 4090 (1,008 GB/s), 7B BF16, context 0, batch 1:
/// 1008e9 ÷ 14,141,238,272 ≈ 71.3 tok/s.
pub fn decode_ceiling_tok_s(
    bandwidth_gb_s: f64,
    weight_bytes: u64,
    embedding_bytes: u64,
    tied: bool,
    kv_bytes_per_token: u64,
    context: u64,
    batch: u64,
) -> f64 {
    todo!("练习 2 / exercise 2: decode_ceiling_tok_s")
}

/// **练习 3(笔记本 02、05)· 每个 token 的 KV cache 字节数(分组查询注意力 GQA)。**
/// 输入:层数 `layers`、隐藏维度 `hidden`、Q 头数 `heads`、KV 头数 `kv_heads`、每个元素的字节
/// `dtype_bytes`(BF16 为 2,F32 为 4)。提示:每层存 K 和 V 两份,每份 kv_heads × head_dim 个元素,
/// `head_dim = hidden / heads`。报告的公式 2 × layers × hidden × bytes 忽略了 GQA。
/// Qwen2.5-7B BF16:57,344 B。
///
/// **Exercise 3 (notebooks 02, 05) · KV cache bytes per token with grouped-query attention.**
/// Inputs: layers, hidden size, query heads, key/value heads, bytes per element (2 in BF16, 4 in
/// F32). Hint: each layer keeps K and V, each kv_heads × head_dim values, with
/// `head_dim = hidden / heads`; the report's 2 × layers × hidden × bytes ignores GQA.
/// Qwen2.5-7B in BF16: 57,344 B.
pub fn kv_bytes_per_token(layers: u64, hidden: u64, heads: u64, kv_heads: u64, dtype_bytes: u64) -> u64 {
    todo!("练习 3 / exercise 3: kv_bytes_per_token")
}

/// **练习 4(笔记本 02、03)· 一张卡能放下的最长上下文**(OOM 诊断里“缩短上下文”那一条)。
/// 一次 prefill 处理 `batch` 条各 `seq` 个 token 的序列,需要:权重 + KV cache
/// (kv × seq × batch)+ 保留的 logits(`all_logits` 时每个位置一行:logits × seq × batch;
/// 否则只留最后一个位置:logits × batch)。不计临时显存,分配器不浪费。
/// 返回满足 需要 ≤ `capacity` 的最大 seq,不超过 `requested`;seq = 1 都放不下时返回 0。
/// 提示:需要随 seq 线性增长,可以直接除,不必搜索。例:7B BF16、19 GiB、全部 logits、batch 1:
/// (19 × 2^30 − 15,231,233,024) ÷ 361,472 = 14,302。
///
/// **Exercise 4 (notebooks 02, 03) · The longest context a card holds** (the OOM diagnosis's
/// "shorter context"). A prefill of `batch` sequences of `seq` tokens needs the weights, the KV
/// cache (kv × seq × batch) and the logits it keeps: with `all_logits` one row per position
/// (logits × seq × batch), else the last position's (logits × batch). No transient, an allocator
/// that wastes nothing. Return the largest seq whose need is ≤ `capacity`, at most `requested`, or
/// 0 where seq = 1 does not fit. Hint: the need grows linearly in seq: divide, no search needed.
/// 7B BF16, 19 GiB, all logits, batch 1: (19 × 2^30 − 15,231,233,024) ÷ 361,472 = 14,302.
pub fn longest_context(
    capacity: u64,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
    logits_bytes_per_token: u64,
    batch: u64,
    all_logits: bool,
    requested: u64,
) -> u64 {
    todo!("练习 4 / exercise 4: longest_context")
}

/// **练习 5(笔记本 05、06)· 训练时每张 GPU 上的模型状态**(不含激活)。
/// 输入:参数个数 `params`;权重每个的字节 `weight_bytes`(F32 为 4,BF16 为 2;梯度与权重同一
/// dtype);是否有 F32 主权重副本 `master_f32`(混合精度:每参数 4 B);Adam 每个动量每参数的字节
/// `moment_bytes`(F32 为 4、BF16 为 2,两个动量;SGD 为 0);ZeRO 阶段 `zero`(0–3);GPU 数 `gpus`(≥ 1)。
/// 提示:四部分分别算:权重、梯度、主权重、优化器状态。ZeRO-1 把主权重和优化器状态分到各卡,
/// ZeRO-2 再加梯度,ZeRO-3 再加权重;被分的部分按 GPU 数除并**向上取整**(每部分各自取整)。
/// 文章的 FP32 + Adam:4 + 4 + 8 = 16 B 每参数。
///
/// **Exercise 5 (notebooks 05, 06) · Model states per GPU in training** (no activations).
/// Inputs: parameters; bytes per weight (4 in F32, 2 in BF16; gradients share the weights'
/// dtype); an F32 master copy of the weights (mixed precision: 4 B a parameter); bytes per Adam
/// moment per parameter (4 for F32 moments, 2 for BF16, two moments; 0 for SGD); the ZeRO stage
/// 0–3; GPUs (≥ 1). Hint: four parts: weights, gradients, master copy, optimizer states. ZeRO-1
/// divides the master copy and the optimizer states across the GPUs, ZeRO-2 the gradients too,
/// ZeRO-3 the weights too; a divided part is rounded **up**, each part on its own. The articles'
/// FP32 + Adam: 4 + 4 + 8 = 16 B a parameter.
pub fn train_state_bytes(
    params: u64,
    weight_bytes: u64,
    master_f32: bool,
    moment_bytes: u64,
    zero: u64,
    gpus: u64,
) -> u64 {
    todo!("练习 5 / exercise 5: train_state_bytes")
}

/// **练习 6(笔记本 05 观察 4b)· PyTorch 一步 F32 训练的显存峰值**(transformers 的 Qwen2 + SDPA,
/// `torch.optim.AdamW`)。记 n = batch × seq,P = `params`,所有张量 F32(4 B)。
/// - 常驻:权重 4P + AdamW 两个动量 8P = 12P。
/// - 前向保留:logits 的 log-softmax 4·n·vocab,最后的 norm 4·n·3·hidden,每层
///   4·(n·(10·hidden + 4·intermediate) + batch·heads·seq²)(`checkpoint` 时每层只留输入 4·n·hidden)。
/// - 反向峰值(常驻之上)取两者较大:头部 = 前向保留 + 两份 logits 大小的张量(2 × 4·n·vocab);
///   结尾 = 全部梯度 4P + 两张嵌入表 2 × 4·hidden·vocab。
/// - 更新峰值(常驻之上):8P = 梯度 4P + foreach 的 AdamW 在更新时每个参数一份 F32 副本 4P(共 20 B 每参数)。
///
/// 返回 12P + max(反向峰值, 更新峰值)。
///
/// **Exercise 6 (notebook 05, observation 4b) · PyTorch's F32 training step at its peak**
/// (transformers' Qwen2 with SDPA, `torch.optim.AdamW`). With n = batch × seq, P = params, every
/// tensor F32 (4 B):
/// - held throughout: the weights 4P and AdamW's two moments 8P: 12P;
/// - the forward keeps the log-probabilities 4·n·vocab, the final norm 4·n·3·hidden, and per layer
///   4·(n·(10·hidden + 4·intermediate) + batch·heads·seq²) (with `checkpoint` a layer keeps its
///   input only: 4·n·hidden);
/// - the backward's peak above those 12P, the larger of: at the head, what the forward keeps plus
///   two logits-sized tensors (2 × 4·n·vocab); at the end, every gradient 4P plus two embedding
///   tables (2 × 4·hidden·vocab);
/// - the update's peak above the 12P: 8P, every gradient 4P and the F32 copy of every parameter
///   the foreach AdamW holds while it updates 4P (20 B a parameter in all).
///
/// Return 12P + max(backward peak, update peak).
pub fn pytorch_step_peak(
    params: u64,
    layers: u64,
    hidden: u64,
    intermediate: u64,
    heads: u64,
    vocab: u64,
    batch: u64,
    seq: u64,
    checkpoint: bool,
) -> u64 {
    todo!("练习 6 / exercise 6: pytorch_step_peak")
}

/// **练习 7(笔记本 06 练习 1)· 张量并行时一个 rank 的权重字节。** 模型分到 `gpus` 张卡
/// (`gpus` 整除 heads、kv_heads 和 intermediate),每个元素 `dtype_bytes` 字节。
/// 提示:每层的 q/k/v(权重和偏置)、o、gate/up/down 每张卡各持有 1/gpus;
/// 输出层(不与嵌入共享时)按词表行切分,`gpus` 整除 vocab 时每张卡 1/gpus,否则完整一份;
/// 嵌入和所有 RMSNorm 每张卡完整一份。形状见练习 1。
///
/// **Exercise 7 (notebook 06, exercise 1) · A tensor-parallel rank's weight bytes** for a model
/// split over `gpus` GPUs (dividing heads, kv_heads and intermediate), `dtype_bytes` per element.
/// Hint: every layer's q, k, v (weights and biases), o, gate, up and down: each GPU holds 1/gpus of
/// each; the output layer (untied) split by vocabulary rows, 1/gpus each where `gpus` divides
/// vocab, else whole; the embedding and every RMS norm: whole on every GPU. The shapes are
/// exercise 1's.
pub fn tp_rank_weight_bytes(
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    tied: bool,
    gpus: u64,
    dtype_bytes: u64,
) -> u64 {
    todo!("练习 7 / exercise 7: tp_rank_weight_bytes")
}

/// **练习 8(笔记本 06 练习 2)· NCCL 在第 `rank` 张卡上占的显存**(一组 `gpus` 张卡,rank < gpus)。
/// 少于 2 张卡:0。否则(1 MiB = 2^20 B):固定 832 MiB;再按通道加:每个通道上,这张卡**发送**给的
/// 每个对端 2 MiB,**接收**自的每个对端 10 MiB。对端来自两种结构:
/// - 环:0 → 1 → … → gpus−1 → 0,每个通道都有:向下一个 (rank+1) % gpus 发送,从上一个
///   (rank+gpus−1) % gpus 接收;
/// - 链(一台机器上的“树”):链上相邻的卡两个方向都连(既发送又接收)。2 张和 4 张及以上:24 个
///   通道都用链 0 − 1 − … − (gpus−1);3 张:12 个通道用 0 − 1 − 2,6 个用 1 − 2 − 0,6 个用 2 − 0 − 1。
///
/// 同一通道上环和链遇到同一个对端(同一方向)只算一次。例:4 张卡的第 0 张:发送给 {1},接收自 {1, 3},
/// 832 + 24 × (2 + 2 × 10) = 1,360 MiB。
///
/// **Exercise 8 (notebook 06, exercise 2) · NCCL's memory on GPU `rank` of a group of `gpus`**
/// (rank < gpus). Fewer than 2 GPUs: 0. Otherwise (1 MiB = 2^20 B) 832 MiB fixed, plus per channel
/// 2 MiB for each peer this GPU **sends** to and 10 MiB for each it **receives** from. Peers come
/// from two structures:
/// - the ring 0 → 1 → … → gpus−1 → 0, on every channel: send to (rank+1) % gpus, receive from
///   (rank+gpus−1) % gpus;
/// - the chain (a "tree" on one host): neighbours on the chain are connected both ways (send and
///   receive). Two GPUs and four or more: all 24 channels use the chain 0 − 1 − … − (gpus−1); three:
///   12 channels use 0 − 1 − 2, 6 use 1 − 2 − 0 and 6 use 2 − 0 − 1.
///
/// A peer the ring and the chain both give on a channel (in the same direction) counts once.
/// GPU 0 of 4 sends to {1} and receives from {1, 3}: 832 + 24 × (2 + 2 × 10) = 1,360 MiB.
pub fn nccl_bytes(gpus: u64, rank: u64) -> u64 {
    todo!("练习 8 / exercise 8: nccl_bytes")
}
