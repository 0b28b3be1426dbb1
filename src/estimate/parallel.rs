//! Inference across the GPUs of one host, per GPU. Tensor parallelism: each GPU holds a shard of
//! every layer (`model::parallel::shard`: whole heads and MLP columns per rank) and of an untied
//! head (its vocabulary rows), the embedding and norms whole. Pipeline: whole layers per GPU, the first also holding the embedding, the
//! last the final norm and the head (a tied table is held by both), split so the GPUs' weights
//! are as even as whole layers allow; a hidden state crosses between stages, no NCCL. Per GPU:
//! weights, KV cache, the forward's transient and logits, NCCL's own memory and the runtime
//! outside the pool.
//!
//! The transient of a tensor-parallel rank is the one-GPU formula on the rank's shape (its heads
//! and MLP width, the hidden size whole): q and the attention output at the rank's query width.

use crate::error::{LabError, Result};
use crate::estimate::bytes::{kv_bytes_per_token, per_layer, weight_bytes, with_layers};
use crate::estimate::fit::{self, Inference};
use crate::estimate::training::{step_peak, TrainShape};
use crate::estimate::transient;
use crate::model::parallel::shard::{rank_ledger, shard_config};
use crate::model::DecoderConfig;
use serde::Serialize;

/// NCCL's device memory on one GPU of a group, as NCCL 2.28 laid it out over NVLink: on two H100s
/// (its INIT, ALLOC and P2P log: data/results/h100x2/2026-11-25-multi-gpu, RUN.md) and on three
/// and four H200s (data/results/h200x4/2026-11-26-four-gpus, RUN.md). Every allocation is a
/// multiple of the 2 MiB granule of CUDA's virtual memory API.
pub mod nccl {
    const MIB: u64 = 1 << 20;
    /// Channels NCCL opened between NVLink GPUs, two to four of them.
    pub const CHANNELS: u64 = 24;
    /// Per channel and peer a rank receives from: the protocols' buffers (SIMPLE 4 MiB, LL128 and
    /// LL) in one 10 MiB shareable allocation.
    pub const PER_CHANNEL_RECV: u64 = 10 * MIB;
    /// Per channel and peer a rank sends to: one 2 MiB allocation.
    pub const PER_CHANNEL_SEND: u64 = 2 * MIB;
    /// Channel structures (32 channels × 3 allocations of the 2 MiB granule) and two at init.
    pub const STATE: u64 = (32 * 3 + 2) * 2 * MIB;
    /// One 256 MiB shareable buffer per GPU.
    pub const SHARED: u64 = 256 * MIB;
    /// What NCCL's log does not name (its device code and proxy), read as the rest of the 1,120
    /// MiB each GPU of a fresh process held once its rank had joined a group of two (H100; 4 MiB
    /// less on H200s).
    pub const UNLOGGED: u64 = 380 * MIB;
    /// The lab's own block for the peer sum beside NCCL's (`model::kernels::peer_sum::BYTES`):
    /// one 2 MiB allocation on every GPU of a group, used or not.
    pub const PEER_SUM: u64 = 2 * MIB;

    /// The trees NCCL built, with how many channels use each: on one host a tree is a chain of
    /// the GPUs. Two and four GPUs: 0 − 1 − … on every channel; three: the chain starts at each
    /// GPU in turn (12, 6 and 6 channels), as NCCL's "Trees" log line showed. Beyond four, one
    /// chain is assumed (not measured).
    pub fn chains(gpus: usize) -> Vec<(u64, Vec<usize>)> {
        let from = |first: usize| (0..gpus).map(|i| (first + i) % gpus).collect();
        match gpus {
            3 => vec![(12, from(0)), (6, from(1)), (6, from(2))],
            _ => vec![(CHANNELS, from(0))],
        }
    }

    /// The peers `rank` of `gpus` sends to and receives from on a channel whose tree is `chain`:
    /// its ring neighbours (0 → 1 → … → N−1 → 0 on every channel) and its chain neighbours, used
    /// both ways. A peer met by both is connected once (one connection a peer and direction).
    pub fn peers(gpus: usize, rank: usize, chain: &[usize]) -> (u64, u64) {
        let at = chain.iter().position(|&g| g == rank).unwrap_or(0);
        let near: Vec<usize> =
            [at.checked_sub(1).map(|i| chain[i]), chain.get(at + 1).copied()].into_iter().flatten().collect();
        let distinct = |ring: usize| (near.len() + usize::from(!near.contains(&ring))) as u64;
        (distinct((rank + 1) % gpus), distinct((rank + gpus - 1) % gpus))
    }
}

/// NCCL's device memory on GPU `rank` of a group of `gpus` (none alone): fixed parts, then per
/// channel 2 MiB for each peer it sends to and 10 MiB for each it receives from. Where the ring and
/// the chain meet on the same peer the rank holds less: on four GPUs rank 0 sends to one peer and
/// receives from two, rank 3 the other way round, ranks 1 and 2 two each way (measured 1,356,
/// 1,164, 1,404 MiB on four H200s, each 4 MiB under the ledger).
pub fn nccl_bytes(gpus: usize, rank: usize) -> u64 {
    if gpus < 2 {
        return 0;
    }
    let rank = rank.min(gpus - 1);
    let buffers: u64 = nccl::chains(gpus)
        .iter()
        .map(|(channels, chain)| {
            let (send, recv) = nccl::peers(gpus, rank, chain);
            channels * (nccl::PER_CHANNEL_SEND * send + nccl::PER_CHANNEL_RECV * recv)
        })
        .sum();
    nccl::STATE + nccl::SHARED + nccl::UNLOGGED + buffers
}

/// What GPU `rank` of a group of `gpus` holds for the sums (none alone): NCCL's memory and the
/// lab's peer-sum block, the bytes `vram-lab parallel` and `train` measure as NCCL's.
pub fn comm_bytes(gpus: usize, rank: usize) -> u64 {
    if gpus < 2 {
        return 0;
    }
    nccl_bytes(gpus, rank) + nccl::PEER_SUM
}

/// The most the sums take on any GPU of a group of `gpus`: what a plan must leave free on each card.
pub fn comm_bytes_most(gpus: usize) -> u64 {
    (0..gpus).map(|r| comm_bytes(gpus, r)).max().unwrap_or(0)
}

/// What one GPU of a group needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuNeed {
    pub gpu: usize,
    /// The layers it computes, first..last (all of them under tensor parallelism).
    pub layers: (usize, usize),
    pub weights: u64,
    pub kv_cache: u64,
    pub transient: u64,
    pub logits: u64,
    pub nccl: u64,
    /// What the pool maps beyond the live bytes at the busiest moment (`fit::Ledger::pool`): the
    /// one-GPU ledger's for the same prefill, as a stage's busiest moment holds the same
    /// activations. A card that must hold the need must hold this too.
    pub pool: u64,
    pub runtime: u64,
}

impl GpuNeed {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.transient + self.logits + self.nccl + self.pool + self.runtime
    }
}

/// Tensor parallelism over `gpus`: every GPU holds the same.
pub fn tensor_parallel(cfg: &DecoderConfig, w: &Inference, gpus: usize, runtime: u64) -> Result<Vec<GpuNeed>> {
    let Some(dtype) = w.precision.dense_dtype() else {
        return Err(LabError::input(format!(
            "tensor parallelism splits dense weights (bf16, f16, f32), not {}",
            w.precision
        )));
    };
    let rank_cfg = shard_config(cfg, gpus)?;
    let tokens = (w.seq * w.batch) as u64;
    let act = w.precision.act_dtype().size_in_bytes() as u64;
    let shard = rank_ledger(cfg, gpus, dtype.size_in_bytes() as u64, tokens, act)?;
    let one = fit::ledger(&rank_cfg, w, 0);
    Ok((0..gpus)
        .map(|gpu| GpuNeed {
            gpu,
            layers: (0, cfg.num_hidden_layers),
            weights: shard.weights(),
            kv_cache: shard.kv_cache,
            transient: one.transient,
            logits: one.logits,
            nccl: comm_bytes(gpus, gpu),
            pool: one.pool,
            runtime,
        })
        .collect())
}

/// Where each of `gpus` pipeline stages starts: whole layers, the weights as even as they allow
/// (the first stage carries the embedding, the last the head).
pub fn pipeline_split(
    layers: usize,
    layer_bytes: u64,
    embed: u64,
    head: u64,
    gpus: usize,
) -> Result<Vec<(usize, usize)>> {
    if gpus == 0 || gpus > layers {
        return Err(LabError::input(format!(
            "{gpus} pipeline stages for {layers} layers: each stage needs at least one layer"
        )));
    }
    let total = embed + head + layers as u64 * layer_bytes;
    let mut out = Vec::with_capacity(gpus);
    let mut first = 0;
    for g in 0..gpus {
        let left = gpus - g - 1;
        if left == 0 {
            out.push((first, layers));
            break;
        }
        // Layers up to the point where the weights so far reach (g + 1) / gpus of the total,
        // leaving at least one layer for each later stage.
        let target = total * (g as u64 + 1) / gpus as u64;
        let mut last = first + 1;
        while last < layers - left && embed + (last as u64 + 1) * layer_bytes <= target {
            last += 1;
        }
        out.push((first, last));
        first = last;
    }
    Ok(out)
}

/// Pipeline placement over `gpus`.
pub fn pipeline(cfg: &DecoderConfig, w: &Inference, gpus: usize, runtime: u64) -> Result<Vec<GpuNeed>> {
    let act = w.precision.act_dtype().size_in_bytes();
    let none = weight_bytes(&with_layers(cfg, 0), w.precision);
    let layer = (weight_bytes(cfg, w.precision) - none) / cfg.num_hidden_layers as u64;
    let norm = (cfg.hidden_size * act) as u64;
    // Embedding and head: the same size; a tied table is one tensor held by both ends.
    let table = if cfg.tie_word_embeddings { none - norm } else { (none - norm) / 2 };
    let split = pipeline_split(cfg.num_hidden_layers, layer, table, table + norm, gpus)?;
    let tokens = (w.seq * w.batch) as u64;
    let per_layer_kv = kv_bytes_per_token(cfg, act) / cfg.num_hidden_layers as u64 * tokens;
    let one = fit::ledger(cfg, w, 0);
    // A stage before the last runs layers only: its busiest moment is the layers' (the logits
    // are the last stage's), counted whole, as no logits stay beside it.
    let layers_peak = if one.peak_at == "logits" {
        let p = transient::phases(cfg, &w.prefill());
        p.attention.max(p.o_proj).max(p.mlp)
    } else {
        one.transient + one.logits
    };
    Ok(split
        .iter()
        .enumerate()
        .map(|(gpu, &(a, b))| {
            let (first, last) = (gpu == 0, gpu == gpus - 1);
            GpuNeed {
                gpu,
                layers: (a, b),
                weights: (b - a) as u64 * layer + if first { table } else { 0 } + if last { table + norm } else { 0 },
                kv_cache: (b - a) as u64 * per_layer_kv,
                transient: if last { one.transient } else { layers_peak },
                logits: if last { one.logits } else { 0 },
                // The lab's stages hand one hidden state to the next (through the host), no
                // collective: no NCCL buffers.
                nccl: 0,
                pool: one.pool,
                runtime,
            }
        })
        .collect())
}

/// llama.cpp's default shares without `-ts`: each GPU's free memory, here each card's memory
/// less what the runtime takes of it (`runtime` bytes).
pub fn shares_by_memory(cards: &[crate::hw::Card], runtime: u64) -> Vec<f64> {
    cards.iter().map(|c| c.total_bytes().saturating_sub(runtime) as f64).collect()
}

/// llama.cpp's layer split (`--split-mode layer` with every layer on a GPU; llama-model.cpp,
/// `load_tensors`): `layers` + 1 slots, the last the output layer, slot `i` on the first GPU whose
/// cumulative share of `shares` (normalised, in f32 as llama.cpp sums them) exceeds
/// `i / (layers + 1)`. Returns each GPU's layers (first..last, maybe none) and the output's GPU.
/// llama.cpp's `-ts` gives the shares; without it, each GPU's free memory.
pub fn llamacpp_split(layers: usize, shares: &[f64]) -> Result<(Vec<(usize, usize)>, usize)> {
    let devices = super::llamacpp::devices::layer_devices(layers, layers + 1, shares)?;
    let gpu_of = |slot: usize| devices[slot].unwrap_or(shares.len() - 1);
    let mut ranges = vec![(0, 0); shares.len()];
    let mut first = 0;
    for (g, range) in ranges.iter_mut().enumerate() {
        let mut last = first;
        while last < layers && gpu_of(last) == g {
            last += 1;
        }
        *range = (first, last);
        first = last;
    }
    Ok((ranges, gpu_of(layers)))
}

/// Pipeline placement as llama.cpp makes it over GPUs with `shares` of the layers
/// (`llamacpp_split`): each GPU's layers, the final norm and the output layer on the output's GPU
/// (a tied table copied there), the token embedding in host memory; weights tensor by tensor.
/// Each GPU computing layers keeps candle's quantized-matmul buffer (one per device) beside its
/// transient, which the last one's logits moment may top.
pub fn pipeline_llamacpp(cfg: &DecoderConfig, w: &Inference, shares: &[f64], runtime: u64) -> Result<Vec<GpuNeed>> {
    let (split, output) = llamacpp_split(cfg.num_hidden_layers, shares)?;
    let act = w.precision.act_dtype().size_in_bytes();
    let outside = with_layers(cfg, 0).tensor_specs();
    let held = |name: &str| {
        outside.iter().find(|s| s.name == name).map(|s| w.precision.held(cfg, s).bytes(s.elem_count())).unwrap_or(0)
    };
    let head = held("model.norm.weight")
        + if cfg.tie_word_embeddings { held("model.embed_tokens.weight") } else { held("lm_head.weight") };
    let tokens = (w.seq * w.batch) as u64;
    let per_layer_kv = kv_bytes_per_token(cfg, act) / cfg.num_hidden_layers as u64 * tokens;
    let one = fit::ledger(cfg, w, 0);
    let p = transient::phases(cfg, &w.prefill());
    // Layers alone: their busiest moment, no logits beside it.
    let layers_peak = p.attention.max(p.o_proj).max(p.mlp);
    let bytes_of = per_layer(cfg, |s| w.precision.held(cfg, s).bytes(s.elem_count()));
    // A device's quantized buffer grows in its first down projection, the old beside the new.
    let growth = p.down_proj + super::workspace::at_growth(cfg, w.precision, 0, tokens);
    Ok(split
        .iter()
        .enumerate()
        .map(|(gpu, &(a, b))| {
            let (computes, out) = (b > a, gpu == output);
            GpuNeed {
                gpu,
                layers: (a, b),
                weights: (a..b).map(&bytes_of).sum::<u64>() + if out { head } else { 0 },
                kv_cache: (b - a) as u64 * per_layer_kv,
                transient: match (computes, out) {
                    (true, true) => one.transient + one.workspace,
                    (false, true) => one.transient,
                    (true, false) => (layers_peak + one.workspace).max(growth),
                    (false, false) => 0,
                },
                logits: if out { one.logits } else { 0 },
                nccl: 0,
                pool: if computes || out { one.pool } else { 0 },
                runtime: if computes || out { runtime } else { 0 },
            }
        })
        .collect())
}

/// The largest micro-batch of `seq` tokens a card of `capacity` bytes trains with the lab's F32
/// step under data parallelism (every card holds the whole model, its gradients and AdamW states),
/// `overhead` (the CUDA runtime, NCCL's buffers) held beside it; 0 when not even one sequence fits.
/// The articles' unequal cards (24 GB and 16 GB: micro-batches 8 and 4) are this per card.
pub fn micro_batch(cfg: &DecoderConfig, seq: usize, checkpoint: bool, capacity: u64, overhead: u64) -> usize {
    let params = cfg.param_count() as u64;
    let fits = |b: usize| step_peak(cfg, params, TrainShape { batch: b, seq }, checkpoint) + overhead <= capacity;
    if !fits(1) {
        return 0;
    }
    // The peak grows with the batch: double past the edge, then bisect. Tokens stay within the
    // lab's bounds, so the byte counts cannot overflow on an absurd card.
    let (mut lo, mut hi) = (1, 2);
    while hi <= crate::limits::MAX_BATCH && hi * seq <= crate::limits::MAX_SEQ && fits(hi) {
        lo = hi;
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::layers::attention::AttentionMode;
    use crate::model::{Logits, Precision};

    fn w(precision: Precision) -> Inference {
        Inference {
            precision,
            seq: 1024,
            batch: 1,
            logits: Logits::Last,
            attention: AttentionMode::default(),
            stored: None,
            allocator: Default::default(),
        }
    }

    #[test]
    fn micro_batches_stop_at_the_card() {
        let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
        let p = cfg.param_count() as u64;
        let peak = |b| step_peak(&cfg, p, TrainShape { batch: b, seq: 512 }, true);
        for gib in [16u64, 24, 80] {
            let cap = gib << 30;
            let b = micro_batch(&cfg, 512, true, cap, 1 << 30);
            // The largest that fits: b fits, b + 1 does not.
            assert!(b >= 1 && peak(b) + (1 << 30) <= cap && peak(b + 1) + (1 << 30) > cap, "{gib} GiB: {b}");
        }
        assert!(micro_batch(&cfg, 512, true, 24 << 30, 0) > micro_batch(&cfg, 512, true, 16 << 30, 0));
        // Less than the weights and states: none.
        assert_eq!(micro_batch(&cfg, 512, true, 12 * p, 0), 0);
    }

    #[test]
    fn a_split_by_hand() {
        // 10 layers of 10 B, embedding 25 B, head 25 B: 150 B over 3 → 50 B each.
        // Stage 0: embedding + 2 layers (45; a third would make 55 > 50); stage 1: layers 2..7
        // (cumulative 25 + 70 = 95 ≤ 100); stage 2: the rest and the head.
        assert_eq!(pipeline_split(10, 10, 25, 25, 3).unwrap(), vec![(0, 2), (2, 7), (7, 10)]);
        // Every stage keeps a layer, however heavy the ends.
        assert_eq!(pipeline_split(3, 1, 1000, 1000, 3).unwrap(), vec![(0, 1), (1, 2), (2, 3)]);
        assert!(pipeline_split(2, 1, 1, 1, 3).is_err());
    }

    #[test]
    fn qwen7b_over_two_gpus() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let one = fit::ledger(&cfg, &w(Precision::Bf16), 0);
        let tp = tensor_parallel(&cfg, &w(Precision::Bf16), 2, 0).unwrap();
        // Each rank: half the layers' weights, of the head and of the KV cache (2 of 4 K/V
        // heads), the embedding whole.
        assert_eq!(tp[0].kv_cache * 2, one.kv_cache);
        let embed = (cfg.vocab_size * cfg.hidden_size * 2) as u64;
        assert!(
            tp[0].weights > one.weights / 2 && tp[0].weights < one.weights / 2 + embed,
            "{} vs {}",
            tp[0].weights,
            one.weights
        );
        assert!(tp[0].transient < one.transient);
        // 4 K/V heads: 3 GPUs cannot share them.
        assert!(tensor_parallel(&cfg, &w(Precision::Bf16), 3, 0).is_err());
        assert!(tensor_parallel(&cfg, &w(Precision::Q4KM), 2, 0).is_err());
        // Pipeline: every layer once, the weights and the cache add up to one GPU's.
        let pp = pipeline(&cfg, &w(Precision::Bf16), 2, 0).unwrap();
        assert_eq!(pp[0].layers.0, 0);
        assert_eq!(pp[0].layers.1, pp[1].layers.0);
        assert_eq!(pp[1].layers.1, cfg.num_hidden_layers);
        let layers_total: u64 = pp.iter().map(|g| g.weights).sum();
        let per_layer =
            (weight_bytes(&cfg, Precision::Bf16) - weight_bytes(&with_layers(&cfg, 0), Precision::Bf16)) / 28;
        assert!(layers_total.abs_diff(one.weights) <= per_layer, "{layers_total} vs {}", one.weights);
        assert_eq!(pp.iter().map(|g| g.kv_cache).sum::<u64>(), one.kv_cache);
        assert_eq!((pp[0].logits, pp[1].logits), (0, one.logits));
        // A stage before the last peaks in its layers: the whole model's peak, no logits kept.
        assert_eq!(pp[0].transient, one.transient + one.logits);
        assert_eq!(nccl_bytes(1, 0), 0);
    }

    /// NCCL by hand: two GPUs are each other's only peer (one 10 + 2 MiB pair a channel: 1,120 MiB,
    /// as two H100s held; with the lab's 2 MiB peer-sum block, 1,122); on four the ring and chain give rank 0 one send peer and two receive
    /// peers, ranks 1 and 2 two of each, rank 3 two send peers and one receive peer.
    #[test]
    fn nccl_per_rank_by_hand() {
        let fixed = 98 * 2 + 256 + 380;
        assert_eq!(nccl_bytes(2, 0), (fixed + 24 * 12) << 20);
        assert_eq!(nccl_bytes(2, 0), 1120 << 20);
        assert_eq!((comm_bytes(2, 0), comm_bytes(1, 0)), (1122 << 20, 0));
        assert_eq!(nccl_bytes(2, 1), nccl_bytes(2, 0));
        let four: Vec<u64> = (0..4).map(|r| nccl_bytes(4, r) >> 20).collect();
        assert_eq!(
            four,
            [
                fixed + 24 * (2 + 2 * 10),
                fixed + 24 * (2 * 2 + 2 * 10),
                fixed + 24 * (2 * 2 + 2 * 10),
                fixed + 24 * (2 * 2 + 10)
            ]
        );
        assert_eq!(comm_bytes_most(4), comm_bytes(4, 1));
        // Three GPUs, whose chains start at each GPU in turn: rank 0 sends to one peer on the 12
        // channels of 0 − 1 − 2 and to two on the 12 others (36 × 2 MiB), receives from two, one
        // and two (42 × 10 MiB): 1,324 MiB (1,320 measured on H200s).
        assert_eq!(nccl::peers(3, 0, &[1, 2, 0]), (2, 1));
        let three: Vec<u64> = (0..3).map(|r| nccl_bytes(3, r) >> 20).collect();
        assert_eq!(three, [fixed + 36 * 2 + 42 * 10, fixed + 42 * 2 + 42 * 10, fixed + 42 * 2 + 36 * 10]);
    }

    /// llama.cpp's split by hand: 28 layers and the output are 29 slots; even shares put slots
    /// below 29 / 2 (0..=14) on the first GPU; 24:16 puts those below 0.6 × 29 (0..=17) there;
    /// 80 layers even: 0..=40 (81 slots). The output's slot (the last) is the last GPU's.
    #[test]
    fn llamacpp_split_by_hand() {
        assert_eq!(llamacpp_split(28, &[1.0, 1.0]).unwrap(), (vec![(0, 15), (15, 28)], 1));
        assert_eq!(llamacpp_split(28, &[24.0, 16.0]).unwrap(), (vec![(0, 18), (18, 28)], 1));
        assert_eq!(llamacpp_split(80, &[1.0, 1.0]).unwrap(), (vec![(0, 41), (41, 80)], 1));
        // A GPU given no share gets no layers.
        assert_eq!(llamacpp_split(4, &[1.0, 0.0, 1.0]).unwrap(), (vec![(0, 3), (3, 3), (3, 4)], 2));
        assert!(llamacpp_split(4, &[]).is_err() && llamacpp_split(4, &[0.0, 0.0]).is_err());
        assert!(llamacpp_split(4, &[1.0, -1.0]).is_err());
        // Finite in f64, infinite in llama.cpp's f32 sum: refused, not every layer on one card.
        let e = llamacpp_split(4, &[1e300, 1e300]).unwrap_err().to_string();
        assert!(e.contains("not a finite positive f32"), "{e}");
        assert!(llamacpp_split(4, &[3e38, 3e38]).is_err());
    }

    /// The cards hold every weight but the token embedding (in host memory), the whole cache, and
    /// the quantized buffer once each; the output's card the logits.
    #[test]
    fn llamacpp_pipeline_adds_up() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        for p in [Precision::Bf16, Precision::Q4KM] {
            let w = w(p);
            let g = pipeline_llamacpp(&cfg, &w, &[1.0, 1.0], 7).unwrap();
            let embed = with_layers(&cfg, 0)
                .tensor_specs()
                .into_iter()
                .find(|s| s.name == "model.embed_tokens.weight")
                .map(|s| p.held(&cfg, &s).bytes(s.elem_count()))
                .unwrap();
            assert_eq!(g.iter().map(|g| g.weights).sum::<u64>(), weight_bytes(&cfg, p) - embed, "{p}");
            let one = fit::ledger(&cfg, &w, 0);
            assert_eq!(g.iter().map(|g| g.kv_cache).sum::<u64>(), one.kv_cache);
            assert_eq!((g[0].logits, g[1].logits), (0, one.logits));
            assert_eq!(g[1].transient, one.transient + one.workspace);
            assert!(g[0].transient >= one.workspace && g.iter().all(|g| g.runtime == 7));
        }
    }
}
