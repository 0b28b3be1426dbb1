//! What a prefill needs at its peak and what the pool maps for it, and the remedies an OOM
//! diagnosis offers.

use super::bytes::{kv_bytes_per_token, logits_bytes_per_token, weight_bytes};
use super::fit::largest;
use crate::model::{DecoderConfig, Logits, Precision};

/// A prefill: `batch` sequences of `seq` tokens in `precision`, keeping `logits`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub precision: Precision,
    pub seq: usize,
    pub batch: usize,
    pub logits: Logits,
}

/// Bytes a prefill needs at its peak: the weights, the KV cache and the logits it keeps (in the
/// activation dtype: F32 for the lab's Q4, which computes in F32), and the transient above them,
/// given per token (measured by the caller at a size that fitted).
pub fn prefill_need(cfg: &DecoderConfig, w: &Workload, transient_per_token: f64) -> u64 {
    let act = w.precision.act_dtype().size_in_bytes();
    let tokens = (w.seq * w.batch) as u64;
    let logit_rows = match w.logits {
        Logits::All => tokens,
        Logits::Last => w.batch as u64,
    };
    weight_bytes(cfg, w.precision)
        + kv_bytes_per_token(cfg, act) * tokens
        + logits_bytes_per_token(cfg, act) * logit_rows
        + (transient_per_token * tokens as f64) as u64
}

/// What the allocator must map for `w`: the weights, and the rest times `pool_factor`, the ratio
/// of bytes the pool mapped to bytes it handed out above the weights (measured at a size that
/// fitted; 1.0 for an allocator that reuses every freed byte). The stream-ordered pool maps more
/// than it hands out while a forward frees and allocates blocks of many sizes without a
/// synchronisation: its OOMs come from this, not from the allocated total.
pub fn mapped_need(cfg: &DecoderConfig, w: &Workload, transient_per_token: f64, pool_factor: f64) -> u64 {
    let weights = weight_bytes(cfg, w.precision);
    let above = prefill_need(cfg, w, transient_per_token) - weights;
    weights + (above as f64 * pool_factor.max(1.0)) as u64
}

/// One way out of an OOM and what it would need.
#[derive(Debug, Clone, PartialEq)]
pub struct Remedy {
    pub what: &'static str,
    pub change: String,
    pub need: u64,
    pub fits: bool,
}

/// What would have made `w` fit in `capacity` bytes: a shorter context, last-token logits, a
/// smaller batch, Q4 weights, or some layers' weights kept off the GPU (offload).
pub fn remedies(
    cfg: &DecoderConfig,
    w: &Workload,
    capacity: u64,
    transient_per_token: f64,
    pool_factor: f64,
) -> Vec<Remedy> {
    let need = |w: &Workload| mapped_need(cfg, w, transient_per_token, pool_factor);
    let mut out = Vec::new();
    let seq = largest(w.seq, |s| need(&Workload { seq: s, ..*w }) <= capacity);
    out.push(Remedy {
        what: "shorter context",
        change: format!("{} → {seq} tokens", w.seq),
        need: need(&Workload { seq: seq.max(1), ..*w }),
        fits: seq > 0,
    });
    if w.logits == Logits::All {
        let n = need(&Workload { logits: Logits::Last, ..*w });
        out.push(Remedy { what: "last-token logits", change: "all → last".into(), need: n, fits: n <= capacity });
    }
    if w.batch > 1 {
        let b = largest(w.batch, |b| need(&Workload { batch: b, ..*w }) <= capacity);
        out.push(Remedy {
            what: "smaller batch",
            change: format!("{} → {b}", w.batch),
            need: need(&Workload { batch: b.max(1), ..*w }),
            fits: b > 0,
        });
    }
    if !w.precision.is_quantized() {
        let n = need(&Workload { precision: Precision::Q4KM, ..*w });
        out.push(Remedy {
            what: "Q4 weights",
            change: format!("{} → q4_k_m (llama.cpp's mix, computing in BF16)", w.precision),
            need: n,
            fits: n <= capacity,
        });
    }
    // Offload: each layer's weights moved to the host frees its share of the weights.
    let total = need(w);
    let per_layer = weight_bytes(cfg, w.precision) / (cfg.num_hidden_layers as u64 + 1).max(1);
    let over = total.saturating_sub(capacity);
    let layers = over.div_ceil(per_layer.max(1)) as usize;
    let n = cfg.num_hidden_layers;
    out.push(if layers <= n {
        Remedy {
            what: "offload",
            change: format!("{layers} of {n} layers' weights in host memory"),
            need: total - per_layer * layers as u64,
            fits: true,
        }
    } else {
        Remedy {
            what: "offload",
            change: format!(
                "not enough: all {n} layers' weights would leave {} too many",
                crate::units::fmt_bytes(over.saturating_sub(per_layer * n as u64))
            ),
            need: total - per_layer * n as u64,
            fits: false,
        }
    });
    out
}
