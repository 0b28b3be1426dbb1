//! 参考答案(特性 `solutions`)。学生副本里没有这个文件。
//! The reference answers (feature `solutions`): the same signatures as `src/student.rs`, whose
//! doc comments state each exercise. Not in a student's copy (`scripts/student-copy.sh`).
#![allow(clippy::too_many_arguments)]

const MIB: u64 = 1 << 20;

/// Exercise 1: every tensor of the checkpoint, counted.
pub fn param_count(
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    tied: bool,
) -> u64 {
    let kv = kv_heads * (hidden / heads);
    let attention = (hidden * hidden + hidden) + 2 * (kv * hidden + kv) + hidden * hidden;
    let mlp = 3 * intermediate * hidden;
    let norms = 2 * hidden;
    let head = if tied { 0 } else { vocab * hidden };
    vocab * hidden + layers * (attention + mlp + norms) + hidden + head
}

/// Exercise 2: batch × bandwidth ÷ the bytes one step reads.
pub fn decode_ceiling_tok_s(
    bandwidth_gb_s: f64,
    weight_bytes: u64,
    embedding_bytes: u64,
    tied: bool,
    kv_bytes_per_token: u64,
    context: u64,
    batch: u64,
) -> f64 {
    let table = if tied { 0 } else { embedding_bytes };
    let read = weight_bytes - table + kv_bytes_per_token * context * batch;
    batch as f64 * (bandwidth_gb_s * 1e9 / read.max(1) as f64)
}

/// Exercise 3: K and V, kv_heads × head_dim each, in every layer.
pub fn kv_bytes_per_token(layers: u64, hidden: u64, heads: u64, kv_heads: u64, dtype_bytes: u64) -> u64 {
    2 * layers * kv_heads * (hidden / heads) * dtype_bytes
}

/// Exercise 4: what is left after the fixed part, divided by what a token of every sequence adds.
pub fn longest_context(
    capacity: u64,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
    logits_bytes_per_token: u64,
    batch: u64,
    all_logits: bool,
    requested: u64,
) -> u64 {
    let (fixed, per_seq_token) = if all_logits {
        (weight_bytes, kv_bytes_per_token + logits_bytes_per_token)
    } else {
        (weight_bytes + logits_bytes_per_token * batch, kv_bytes_per_token)
    };
    let Some(left) = capacity.checked_sub(fixed) else {
        return 0;
    };
    (left / (per_seq_token * batch).max(1)).min(requested)
}

/// Exercise 5: the four parts, each divided (rounded up) from the ZeRO stage that shards it.
pub fn train_state_bytes(
    params: u64,
    weight_bytes: u64,
    master_f32: bool,
    moment_bytes: u64,
    zero: u64,
    gpus: u64,
) -> u64 {
    let gpus = gpus.max(1);
    let shard = |bytes: u64, from_stage: u64| {
        if zero >= from_stage {
            bytes.div_ceil(gpus)
        } else {
            bytes
        }
    };
    let master = if master_f32 { 4 * params } else { 0 };
    shard(params * weight_bytes, 3)
        + shard(params * weight_bytes, 2)
        + shard(master, 1)
        + shard(2 * moment_bytes * params, 1)
}

/// Exercise 6: 12P held, and the busiest of the head's backward, the end of the backward and the
/// update above it.
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
    const F32: u64 = 4;
    let n = batch * seq;
    let logits = F32 * n * vocab;
    let per_layer = if checkpoint {
        F32 * n * hidden
    } else {
        F32 * (n * (10 * hidden + 4 * intermediate) + batch * heads * seq * seq)
    };
    let forward = logits + F32 * n * 3 * hidden + layers * per_layer;
    let head = forward + 2 * logits;
    let end = F32 * params + 2 * F32 * hidden * vocab;
    let update = 8 * params;
    12 * params + head.max(end).max(update)
}

/// Exercise 7: the layers' matrices and biases split, the rest whole.
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
    let kv = kv_heads * (hidden / heads);
    let split = (hidden * hidden + hidden) + 2 * (kv * hidden + kv) + hidden * hidden + 3 * intermediate * hidden;
    // An untied head is split by vocabulary rows where the GPUs divide them.
    let head = match (tied, vocab.is_multiple_of(gpus)) {
        (true, _) => 0,
        (false, true) => vocab * hidden / gpus,
        (false, false) => vocab * hidden,
    };
    let whole = vocab * hidden + layers * 2 * hidden + hidden;
    dtype_bytes * (layers * split / gpus + head + whole)
}

/// Exercise 8: the fixed 832 MiB, and per channel the distinct peers sent to and received from.
pub fn nccl_bytes(gpus: u64, rank: u64) -> u64 {
    if gpus < 2 {
        return 0;
    }
    let chain_from = |first: u64| -> Vec<u64> { (0..gpus).map(|i| (first + i) % gpus).collect() };
    let chains = if gpus == 3 {
        vec![(12, chain_from(0)), (6, chain_from(1)), (6, chain_from(2))]
    } else {
        vec![(24, chain_from(0))]
    };
    let buffers: u64 = chains
        .iter()
        .map(|(channels, chain)| {
            let at = chain.iter().position(|&g| g == rank).unwrap_or(0);
            let neighbours: Vec<u64> =
                [at.checked_sub(1).map(|i| chain[i]), chain.get(at + 1).copied()].into_iter().flatten().collect();
            let distinct = |ring_peer: u64| neighbours.len() as u64 + u64::from(!neighbours.contains(&ring_peer));
            let send = distinct((rank + 1) % gpus);
            let recv = distinct((rank + gpus - 1) % gpus);
            channels * (2 * MIB * send + 10 * MIB * recv)
        })
        .sum();
    832 * MIB + buffers
}
